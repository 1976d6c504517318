"""CPU backend library ops (lower/library.py): each op's C against the interpreter.

Every case is a one-instruction HLO module. All cases are lowered into ONE C file (compiled once
per test module) with a harness `void run_<case>(void **ins, void **outs)` per case, called with
ctypes on the case's inputs; the file's `hf_parallel_ptr` points at the runtime's pool, so the
cases emitted for several threads (`threads`) really cut their work into tasks. Integers, sorts
and random bits must match the interpreter exactly; float dots and convolutions within a
tolerance (they accumulate in a different order/precision).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import pytest

from hlofuse.backends import interpreter
from hlofuse.backends.cpu import build, cexpr, library, runtime
from hlofuse.backends.cpu.library import blas, scalar
from hlofuse.backends.kernel_ir.lower.library import library_op
from hlofuse.errors import CompileError
from hlofuse.ir.shape import ArrayShape, leaves
from hlofuse.text import parse

BF16 = ml_dtypes.bfloat16


@dataclass
class Case:
    name: str
    hlo: str
    inputs: list[np.ndarray]
    rtol: float = 0.0  # 0: bit-exact
    atol: float = 0.0
    module: object = field(default=None, repr=False)
    threads: int = 1  # threads of the pool the op may use


def _rand(shape: tuple[int, ...], dtype: object, seed: int, lo: float = -1, hi: float = 1):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, int(lo)), min(info.max, int(hi)) + 1, size=shape,
                            dtype=dt)
    return rng.uniform(lo, hi, size=shape).astype(dt)


def _dot(name: str, lhs: str, rhs: str, out: str, dims: str, inputs: list[np.ndarray],
         rtol: float = 2e-5, atol: float = 1e-5) -> Case:
    hlo = f"""
ENTRY e {{
  a = {lhs} parameter(0)
  b = {rhs} parameter(1)
  ROOT d = {out} dot(a, b), {dims}
}}"""
    return Case(name, hlo, inputs, rtol, atol)


DOT_CASES = [
    _dot("dot_plain", "f32[64,96]", "f32[96,80]", "f32[64,80]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((64, 96), "f4", 1), _rand((96, 80), "f4", 2)]),
    _dot("dot_transposed", "f32[33,20]", "f32[18,33]", "f32[20,18]",
         "lhs_contracting_dims={0}, rhs_contracting_dims={1}",
         [_rand((33, 20), "f4", 3), _rand((18, 33), "f4", 4)]),
    _dot("dot_batch", "f32[4,17,33]", "f32[4,33,9]", "f32[4,17,9]",
         "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
         "rhs_contracting_dims={1}",
         [_rand((4, 17, 33), "f4", 5), _rand((4, 33, 9), "f4", 6)]),
    # batch dimension in the middle, free dimensions split around the contracting one
    _dot("dot_scattered_dims", "f32[5,3,7,2]", "f32[7,3,4]", "f32[3,5,2,4]",
         "lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={1}, "
         "rhs_contracting_dims={0}",
         [_rand((5, 3, 7, 2), "f4", 7), _rand((7, 3, 4), "f4", 8)]),
    _dot("dot_two_contracting", "f32[6,4,5]", "f32[5,4,3]", "f32[6,3]",
         "lhs_contracting_dims={1,2}, rhs_contracting_dims={1,0}",
         [_rand((6, 4, 5), "f4", 9), _rand((5, 4, 3), "f4", 10)]),
    _dot("dot_vector", "f32[100]", "f32[100]", "f32[]",
         "lhs_contracting_dims={0}, rhs_contracting_dims={0}",
         [_rand((100,), "f4", 11), _rand((100,), "f4", 12)]),
    _dot("dot_matvec", "f32[37,50]", "f32[50]", "f32[37]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((37, 50), "f4", 13), _rand((50,), "f4", 14)]),
    # several K, M and N blocks
    _dot("dot_blocked", "f32[200,300]", "f32[300,150]", "f32[200,150]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((200, 300), "f4", 15), _rand((300, 150), "f4", 16)], rtol=1e-4, atol=1e-4),
    _dot("dot_empty_k", "f32[3,0]", "f32[0,4]", "f32[3,4]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32)]),
    _dot("dot_f64", "f64[19,23]", "f64[23,11]", "f64[19,11]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((19, 23), "f8", 17), _rand((23, 11), "f8", 18)], rtol=1e-12, atol=1e-12),
    _dot("dot_s32_wraps", "s32[9,40]", "s32[40,7]", "s32[9,7]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((9, 40), "i4", 19, -(2**31), 2**31 - 1),
          _rand((40, 7), "i4", 20, -(2**31), 2**31 - 1)], rtol=0),
    _dot("dot_s8_to_s32", "s8[5,12]", "s8[12,6]", "s32[5,6]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((5, 12), "i1", 21, -128, 127), _rand((12, 6), "i1", 22, -128, 127)], rtol=0),
    _dot("dot_u8_wraps", "u8[4,9]", "u8[9,3]", "u8[4,3]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((4, 9), "u1", 23, 0, 255), _rand((9, 3), "u1", 24, 0, 255)], rtol=0),
    _dot("dot_f16", "f16[16,40]", "f16[40,24]", "f16[16,24]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((16, 40), "f2", 25), _rand((40, 24), "f2", 26)], rtol=2e-3, atol=2e-3),
    _dot("dot_bf16", "bf16[16,40]", "bf16[40,24]", "bf16[16,24]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((16, 40), "f4", 27).astype(BF16), _rand((40, 24), "f4", 28).astype(BF16)],
         rtol=1e-2, atol=1e-2),
    _dot("dot_bf16_to_f32", "bf16[8,30]", "bf16[30,5]", "f32[8,5]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((8, 30), "f4", 29).astype(BF16), _rand((30, 5), "f4", 30).astype(BF16)]),
    # the shapes of real programs: small M, transposed operands (backward passes), batches
    _dot("dot_small_m", "f32[8,128]", "f32[128,200]", "f32[8,200]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((8, 128), "f4", 31), _rand((128, 200), "f4", 32)], rtol=1e-4, atol=1e-4),
    _dot("dot_weight_grad", "f32[70,24]", "f32[70,40]", "f32[24,40]",  # x^T g: lhs transposed
         "lhs_contracting_dims={0}, rhs_contracting_dims={0}",
         [_rand((70, 24), "f4", 33), _rand((70, 40), "f4", 34)], rtol=1e-4, atol=1e-4),
    _dot("dot_input_grad", "f32[13,40]", "f32[24,40]", "f32[13,24]",  # g W^T: rhs transposed
         "lhs_contracting_dims={1}, rhs_contracting_dims={1}",
         [_rand((13, 40), "f4", 35), _rand((24, 40), "f4", 36)], rtol=1e-4, atol=1e-4),
    # g W^T packed from W's rows (gemm.py's hflib_pack_cols: 4 x 4 blocks transposed in
    # registers): K past one 256-deep block and not a multiple of 4, N past one 32-wide panel
    # and not a multiple of 4; f64 and wrapping s32 too
    _dot("dot_input_grad_blocked", "f32[70,301]", "f32[37,301]", "f32[70,37]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={1}",
         [_rand((70, 301), "f4", 43), _rand((37, 301), "f4", 44)], rtol=1e-4, atol=1e-4),
    _dot("dot_input_grad_f64", "f64[41,45]", "f64[39,45]", "f64[41,39]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={1}",
         [_rand((41, 45), "f8", 45), _rand((39, 45), "f8", 46)], rtol=1e-12, atol=1e-12),
    _dot("dot_input_grad_s32", "s32[30,23]", "s32[35,23]", "s32[30,35]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={1}",
         [_rand((30, 23), "i4", 47, -(2**31), 2**31 - 1),
          _rand((35, 23), "i4", 48, -(2**31), 2**31 - 1)], rtol=0),
    _dot("dot_both_transposed", "f32[30,9]", "f32[11,30]", "f32[9,11]",
         "lhs_contracting_dims={0}, rhs_contracting_dims={1}",
         [_rand((30, 9), "f4", 37), _rand((11, 30), "f4", 38)], rtol=1e-4, atol=1e-4),
    # attention scores q k^T per (batch, head) and the weighted sum p v
    _dot("dot_batch_scores", "f32[6,16,8]", "f32[6,16,8]", "f32[6,16,16]",
         "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
         "rhs_contracting_dims={2}",
         [_rand((6, 16, 8), "f4", 39), _rand((6, 16, 8), "f4", 40)], rtol=1e-4, atol=1e-4),
    _dot("dot_batch_two_dims", "f32[2,3,16,16]", "f32[2,3,16,8]", "f32[2,3,16,8]",
         "lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, "
         "rhs_contracting_dims={2}",
         [_rand((2, 3, 16, 16), "f4", 41), _rand((2, 3, 16, 8), "f4", 42)], rtol=1e-4,
         atol=1e-4),
    # batch dimension not leading: strided operands (no BLAS layout), batch of a transposed lhs
    _dot("dot_batch_middle", "f32[16,4,8]", "f32[4,8,5]", "f32[4,16,5]",
         "lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
         "rhs_contracting_dims={1}",
         [_rand((16, 4, 8), "f4", 43), _rand((4, 8, 5), "f4", 44)], rtol=1e-4, atol=1e-4),
    _dot("dot_batch_lhs_transposed", "f32[3,20,7]", "f32[3,20,5]", "f32[3,7,5]",
         "lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, "
         "rhs_contracting_dims={1}",
         [_rand((3, 20, 7), "f4", 45), _rand((3, 20, 5), "f4", 46)], rtol=1e-4, atol=1e-4),
    _dot("dot_f64_batch_transposed", "f64[4,9,30]", "f64[4,12,30]", "f64[4,9,12]",
         "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
         "rhs_contracting_dims={2}",
         [_rand((4, 9, 30), "f8", 47), _rand((4, 12, 30), "f8", 48)], rtol=1e-12,
         atol=1e-12),
    # integer tiles of every height: 8 rows (one 8-row panel where vectors are 64 bytes), 7
    _dot("dot_s32_eight_rows", "s32[8,50]", "s32[50,40]", "s32[8,40]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((8, 50), "i4", 51, -1000, 1000), _rand((50, 40), "i4", 52, -1000, 1000)],
         rtol=0),
    _dot("dot_s64_seven_rows_transposed", "s64[30,7]", "s64[9,30]", "s64[7,9]",
         "lhs_contracting_dims={0}, rhs_contracting_dims={1}",
         [_rand((30, 7), "i8", 53, -(2**40), 2**40), _rand((9, 30), "i8", 54, -(2**40), 2**40)],
         rtol=0),
    _dot("dot_one_row_one_col", "f32[1,50]", "f32[50,1]", "f32[1,1]",
         "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
         [_rand((1, 50), "f4", 49), _rand((50, 1), "f4", 50)], rtol=1e-5, atol=1e-5),
]


def _sort(name: str, cmp: str, operands: list[str], dim: int, inputs: list[np.ndarray]) -> Case:
    params = "\n".join(f"  x{i} = {t} parameter({i})" for i, t in enumerate(operands))
    args = ", ".join(f"x{i}" for i in range(len(operands)))
    shape = f"({', '.join(operands)})" if len(operands) > 1 else operands[0]
    hlo = f"""
{cmp}

ENTRY e {{
{params}
  ROOT s = {shape} sort({args}), dimensions={{{dim}}}, is_stable=true, to_apply=cmp
}}"""
    return Case(name, hlo, inputs)


def _cmp(params: list[str], root: str) -> str:
    lines = [f"  p{i} = {t}[] parameter({i})" for i, t in enumerate(params)]
    return "cmp {\n" + "\n".join(lines) + "\n" + root + "\n}"


_F_SPECIAL = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, 1.0, -2.5, 3.0],
                      np.float32)


def _with_specials(x: np.ndarray, seed: int) -> np.ndarray:
    flat = x.reshape(-1).copy()
    rng = np.random.default_rng(seed)
    pos = rng.choice(flat.size, size=min(flat.size, 3 * len(_F_SPECIAL)), replace=False)
    flat[pos] = np.resize(_F_SPECIAL, len(pos)).astype(x.dtype)
    return flat.reshape(x.shape)


SORT_CASES = [
    _sort("sort_f32_totalorder", _cmp(["f32", "f32"],
          "  ROOT r = pred[] compare(p0, p1), direction=LT, type=TOTALORDER"),
          ["f32[300]"], 0, [_with_specials(_rand((300,), "f4", 40, -3, 3).round(), 41)]),
    _sort("sort_f32_descending_2d", _cmp(["f32", "f32"],
          "  ROOT r = pred[] compare(p0, p1), direction=GT, type=TOTALORDER"),
          ["f32[7,45]"], 1, [_with_specials(_rand((7, 45), "f4", 42, -3, 3).round(), 43)]),
    # ties in the key; the payload shows the order is stable
    _sort("sort_stable_dim0", _cmp(["s32", "s32", "s32", "s32"],
          "  ROOT r = pred[] compare(p0, p1), direction=LT"),
          ["s32[50,3]", "s32[50,3]"], 0,
          [_rand((50, 3), "i4", 44, 0, 5), np.arange(150, dtype=np.int32).reshape(50, 3)]),
    _sort("sort_lexicographic", _cmp(["s32", "s32", "f32", "f32", "u8", "u8"], """\
  lt0 = pred[] compare(p0, p1), direction=LT
  eq0 = pred[] compare(p0, p1), direction=EQ
  gt1 = pred[] compare(p2, p3), direction=GT, type=TOTALORDER
  second = pred[] and(eq0, gt1)
  ROOT r = pred[] or(lt0, second)"""),
          ["s32[4,3,37]", "f32[4,3,37]", "u8[4,3,37]"], 2,
          [_rand((4, 3, 37), "i4", 45, 0, 4), _rand((4, 3, 37), "f4", 46, 0, 3).round(),
           _rand((4, 3, 37), "u1", 47, 0, 255)]),
    _sort("sort_f16_keys", _cmp(["f16", "f16", "s32", "s32"],
          "  ROOT r = pred[] compare(p0, p1), direction=LT, type=TOTALORDER"),
          ["f16[2,70]", "s32[2,70]"], 1,
          [_with_specials(_rand((2, 70), "f2", 48, -4, 4).round(), 49),
           np.arange(140, dtype=np.int32).reshape(2, 70)]),
    _sort("sort_single_element_rows", _cmp(["f32", "f32"],
          "  ROOT r = pred[] compare(p0, p1), direction=LT"),
          ["f32[5,1]"], 1, [_rand((5, 1), "f4", 50)]),
]


# jnp.sort's float comparator: NaNs made one NaN and -0 made +0 on both sides, then TOTALORDER
_JAX_FLOAT_CMP = """\
  n0 = pred[] compare(p0, p0), direction=NE
  nan = {t}[] constant(nan)
  zero = {t}[] constant(0)
  z0 = pred[] compare(p0, zero), direction=EQ
  s0 = {t}[] select(z0, zero, p0)
  c0 = {t}[] select(n0, nan, s0)
  n1 = pred[] compare(p1, p1), direction=NE
  z1 = pred[] compare(p1, zero), direction=EQ
  s1 = {t}[] select(z1, zero, p1)
  c1 = {t}[] select(n1, nan, s1)
  ROOT r = pred[] compare(c0, c1), direction=LT, type=TOTALORDER"""

# rows of RADIX_MIN or more whose comparator orders by one key sort by radix (sort_key.py)
RADIX_CASES = [
    _sort("radix_u32_ties_payload", _cmp(["u32", "u32", "s32", "s32"],
          "  ROOT r = pred[] compare(p0, p1), direction=LT"),
          ["u32[4096]", "s32[4096]"], 0,
          [_rand((4096,), "u4", 100, 0, 40), np.arange(4096, dtype=np.int32)]),
    _sort("radix_u32_full_range", _cmp(["u32", "u32", "s32", "s32"],
          "  ROOT r = pred[] compare(p0, p1), direction=LT"),
          ["u32[3000]", "s32[3000]"], 0,
          [_rand((3000,), "u4", 101, 0, 2**32 - 1), np.arange(3000, dtype=np.int32)]),
    _sort("radix_s8_rows", _cmp(["s8", "s8", "u16", "u16"],
          "  ROOT r = pred[] compare(p0, p1), direction=LT, type=SIGNED"),
          ["s8[2,600]", "u16[2,600]"], 1,
          [_rand((2, 600), "i1", 102, -128, 127),
           np.arange(1200, dtype=np.uint16).reshape(2, 600)]),
    _sort("radix_s64_descending_dim0", _cmp(["s64", "s64", "s32", "s32"],
          "  ROOT r = pred[] compare(p0, p1), direction=GT"),
          ["s64[700,3]", "s32[700,3]"], 0,
          [_rand((700, 3), "i8", 103, -(2**62), 2**62) // (2**55),
           np.arange(2100, dtype=np.int32).reshape(700, 3)]),
    _sort("radix_u64_u16", _cmp(["u64", "u64", "u16", "u16"],
          "  ROOT r = pred[] compare(p2, p3), direction=LT"),  # the key is the second operand
          ["u64[900]", "u16[900]"], 0,
          [_rand((900,), "u8", 104, 0, 2**64 - 1), _rand((900,), "u2", 105, 0, 70)]),
    _sort("radix_f32_totalorder", _cmp(["f32", "f32", "s32", "s32"],
          "  ROOT r = pred[] compare(p0, p1), direction=LT, type=TOTALORDER"),
          ["f32[1000]", "s32[1000]"], 0,
          [_with_specials(_rand((1000,), "f4", 106, -5, 5).round(1), 107),
           np.arange(1000, dtype=np.int32)]),
    _sort("radix_f32_jax_canonical", _cmp(["f32", "f32", "s32", "s32"],
                                          _JAX_FLOAT_CMP.format(t="f32")),
          ["f32[3,400]", "s32[3,400]"], 1,
          [_with_specials(_rand((3, 400), "f4", 108, -5, 5).round(), 109),
           np.arange(1200, dtype=np.int32).reshape(3, 400)]),
    _sort("radix_f64_swapped_operands", _cmp(["f64", "f64"],  # compare(rhs, lhs): descending
          "  ROOT r = pred[] compare(p1, p0), direction=LT, type=TOTALORDER"),
          ["f64[2,300]"], 1,
          [_with_specials(_rand((2, 300), "f8", 110, -9, 9).round(2), 111)]),
    _sort("radix_bf16_keys", _cmp(["bf16", "bf16", "s32", "s32"],
          "  ROOT r = pred[] compare(p0, p1), direction=GT, type=TOTALORDER"),
          ["bf16[500]", "s32[500]"], 0,
          [_with_specials(_rand((500,), "f4", 112, -4, 4).round().astype(BF16), 113),
           np.arange(500, dtype=np.int32)]),
    # a float compare without TOTALORDER is no strict weak order with NaNs: merge sort
    _sort("sort_f32_partial_order_long", _cmp(["f32", "f32", "s32", "s32"],
          "  ROOT r = pred[] compare(p0, p1), direction=LT"),
          ["f32[400]", "s32[400]"], 0,
          [_rand((400,), "f4", 114, -9, 9).round(), np.arange(400, dtype=np.int32)]),
]


def _topk(name: str, shape: str, out: str, k: int, largest: bool, x: np.ndarray) -> Case:
    hlo = f"""
ENTRY e {{
  x = {shape} parameter(0)
  ROOT t = ({out}, s32{out[out.index('['):]}) topk(x), k={k}, largest={str(largest).lower()}
}}"""
    return Case(name, hlo, [x])


TOPK_CASES = [
    _topk("topk_f32_largest", "f32[6,40]", "f32[6,5]", 5, True,
          _with_specials(_rand((6, 40), "f4", 60, -3, 3).round(), 61)),
    _topk("topk_s32_smallest", "s32[3,25]", "s32[3,4]", 4, False, _rand((3, 25), "i4", 62, 0, 6)),
]


def _rng(name: str, algorithm: str, state: np.ndarray, out: str) -> Case:
    n = len(state)
    hlo = f"""
ENTRY e {{
  s = u64[{n}] parameter(0)
  ROOT r = (u64[{n}], {out}) rng-bit-generator(s), algorithm={algorithm}
}}"""
    return Case(name, hlo, [state])


_KEY = np.array([0xDEADBEEF12345678, 2**64 - 3], np.uint64)
RNG_CASES = [
    _rng(f"rng_{alg}_{i}", f"rng_{alg}", _KEY if i % 2 else np.array([1, 2], np.uint64), out)
    for alg in ("three_fry", "philox")
    for i, out in enumerate(["u32[3,5]", "u32[7]", "u32[]", "u8[5]", "u16[4,3]", "u64[2,3]",
                             "s32[3,3]", "f32[5,3]", "u64[]", "u32[3,5,7]"])
] + [
    _rng("rng_philox_state3", "rng_philox",
         np.array([7, 2**64 - 2, 5], np.uint64), "u32[9]"),
    _rng("rng_default", "rng_default", np.array([3, 4], np.uint64), "u64[5]"),
]

def _conv(name: str, lhs: tuple[str, tuple[int, ...]], rhs: tuple[str, tuple[int, ...]],
          out: str, attrs: str, seed: int, rtol: float = 2e-5, atol: float = 1e-4) -> Case:
    """A float convolution accumulates in float (conv_gemm.py), operands in [-3, 3]; more
    cases in test_cpu_conv.py."""
    lt, ld = lhs
    rt, rd = rhs
    np_t = {"f32": "f4", "f16": "f2", "s32": "i4"}
    hlo = f"""
ENTRY e {{
  a = {lt}{list(ld)} parameter(0)
  b = {rt}{list(rd)} parameter(1)
  ROOT c = {out} convolution(a, b), {attrs}
}}"""
    inputs = [_rand(ld, np_t[lt], seed, -3, 3), _rand(rd, np_t[rt], seed + 1, -3, 3)]
    return Case(name, hlo, inputs, rtol, atol)


CONV_CASES = [
    _conv("conv_nhwc_strided", ("f32", (2, 9, 9, 3)), ("f32", (3, 3, 3, 4)), "f32[2,5,5,4]",
          "window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", 70),
    _conv("conv_nchw_dilated_reversed", ("f32", (1, 2, 6, 5)), ("f32", (3, 2, 2, 3)),
          "f32[1,3,11,4]",
          "window={size=2x3 pad=1_0x2_1 lhs_dilate=2x1 rhs_dilate=1x2 rhs_reversal=1x0}, "
          "dim_labels=bf01_oi01->bf01", 72),
    _conv("conv_feature_groups", ("f32", (1, 6, 6, 4)), ("f32", (3, 3, 2, 6)), "f32[1,4,4,6]",
          "window={size=3x3}, dim_labels=b01f_01io->b01f, feature_group_count=2", 74),
    _conv("conv_batch_groups", ("f32", (4, 5, 5, 3)), ("f32", (2, 2, 3, 4)), "f32[2,4,4,4]",
          "window={size=2x2}, dim_labels=b01f_01io->b01f, batch_group_count=2", 76),
    _conv("conv_1d_s32_negative_pad", ("s32", (2, 10, 3)), ("s32", (3, 3, 2)), "s32[2,9,2]",
          "window={size=3 pad=-1_2}, dim_labels=b0f_0io->b0f", 78, rtol=0, atol=0),
    _conv("conv_f16", ("f16", (1, 7, 7, 2)), ("f16", (2, 2, 2, 3)), "f16[1,6,6,3]",
          "window={size=2x2}, dim_labels=b01f_01io->b01f", 80, rtol=1e-3, atol=1e-2),
]

def _select_scatter(name: str, t: str, operand: tuple[int, ...], source: tuple[int, ...],
                    window: str, direction: str, seed: int, rtol: float = 0.0) -> Case:
    dims = ",".join(map(str, operand))
    sdims = ",".join(map(str, source))
    hlo = f"""
select {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT c = pred[] compare(a, b), direction={direction}
}}

scatter {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT c = {t}[] add(a, b)
}}

ENTRY e {{
  x = {t}[{dims}] parameter(0)
  s = {t}[{sdims}] parameter(1)
  z = {t}[] parameter(2)
  ROOT r = {t}[{dims}] select-and-scatter(x, s, z), window={window}, select=select,
    scatter=scatter
}}"""
    np_t = {"f32": "f4", "s32": "i4"}[t]
    inputs = [_rand(operand, np_t, seed, -4, 4).round().astype(np_t),  # ties in the windows
              _rand(source, np_t, seed + 1, -4, 4), np.asarray(1, np_t)]
    return Case(name, hlo, inputs, rtol, rtol)


SELECT_SCATTER_CASES = [
    _select_scatter("select_scatter_maxpool_grad", "f32", (2, 8, 8, 3), (2, 4, 4, 3),
                    "{size=1x2x2x1 stride=1x2x2x1}", "GE", 90, rtol=1e-6),
    _select_scatter("select_scatter_overlapping_padded", "s32", (7, 6), (4, 6),
                    "{size=3x2 stride=2x1 pad=1_1x0_1}", "GT", 92),
    _select_scatter("select_scatter_min", "s32", (9,), (5,), "{size=3 stride=2 pad=1_1}",
                    "LE", 94),
]

def _threaded(case: Case, threads: int) -> Case:
    return Case(f"{case.name}_{threads}threads", case.hlo, case.inputs, case.rtol, case.atol,
                threads=threads)


# big enough to be cut into tasks for the pool (gemm/conv/sort PARALLEL_WORK)
THREADED_CASES = [
    _threaded(next(c for c in DOT_CASES if c.name == "dot_blocked"), 3),  # row blocks
    _threaded(_dot("dot_batch_tasks", "f32[6,64,70]", "f32[6,70,50]", "f32[6,64,50]",
                   "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                   "rhs_contracting_dims={1}",
                   [_rand((6, 64, 70), "f4", 55), _rand((6, 70, 50), "f4", 56)], rtol=1e-4,
                   atol=1e-4), 4),
    _threaded(_dot("dot_s32_tasks", "s32[120,100]", "s32[100,90]", "s32[120,90]",
                   "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                   [_rand((120, 100), "i4", 57, -1000, 1000),
                    _rand((100, 90), "i4", 58, -1000, 1000)]), 2),
    _threaded(_conv("conv_tasks", ("f32", (4, 20, 20, 8)), ("f32", (3, 3, 8, 16)),
                    "f32[4,20,20,16]", "window={size=3x3 pad=1_1x1_1}, "
                    "dim_labels=b01f_01io->b01f", 80), 3),
    _threaded(_sort("sort_tasks", _cmp(["f32", "f32", "s32", "s32"],
                    "  ROOT r = pred[] compare(p0, p1), direction=LT, type=TOTALORDER"),
                    ["f32[64,2000]", "s32[64,2000]"], 1,
                    [_rand((64, 2000), "f4", 82, -50, 50).round(),
                     np.arange(128000, dtype=np.int32).reshape(64, 2000)]), 3),
    _threaded(_sort("radix_tasks", _cmp(["s32", "s32", "s32", "s32"],
                    "  ROOT r = pred[] compare(p0, p1), direction=LT"),
                    ["s32[40,3000]", "s32[40,3000]"], 1,
                    [_rand((40, 3000), "i4", 115, -300, 300),
                     np.arange(120000, dtype=np.int32).reshape(40, 3000)]), 2),
    _threaded(_topk("topk_tasks", "f32[100,1200]", "f32[100,7]", 7, True,
                    _rand((100, 1200), "f4", 84, -9, 9).round()), 2),
]

CASES = (DOT_CASES + CONV_CASES + SELECT_SCATTER_CASES + SORT_CASES + RADIX_CASES + TOPK_CASES
         + RNG_CASES
         + THREADED_CASES)


def _harness(i: int, case: Case, names: set[str]) -> tuple[str, str]:
    module = parse(case.hlo)
    case.module = module
    instr = module.entry.root
    n_in = sum(len(leaves(p.shape)) for p in instr.operands)
    ins = [f"ins[{j}]" for j in range(n_in)]
    outs = [f"outs[{j}]" for j in range(len(leaves(instr.shape)))]
    defs, stmts = library.emit(library_op(instr), ins, outs, names, case.threads)
    body = "\n".join("    " + line for line in stmts.rstrip("\n").split("\n"))
    return defs, f"void run_{i}(void **ins, void **outs) {{\n{body}\n}}\n"


@pytest.fixture(scope="module")
def compiled() -> ctypes.CDLL:
    names: set[str] = set()
    parts = [cexpr.prelude()]
    for i, case in enumerate(CASES):
        defs, fn = _harness(i, case, names)
        parts += [defs, fn]
    lib = build.load_library("\n".join(parts), name="test_cpu_library")
    pool = runtime.parallel_address()
    if pool is not None:
        ctypes.c_void_p.in_dll(lib, "hf_parallel_ptr").value = pool
    return lib


def _run(lib: ctypes.CDLL, i: int, case: Case) -> list[np.ndarray]:
    instr = case.module.entry.root  # type: ignore[attr-defined]
    ins = [np.ascontiguousarray(x) for x in case.inputs]
    outs = []
    for s in leaves(instr.shape):
        assert isinstance(s, ArrayShape)
        outs.append(np.full(s.dims, 0x5A, np.uint8).view(s.dtype.np).reshape(s.dims)
                    if s.dtype.bits == 8 else np.empty(s.dims, s.dtype.np))
    in_ptrs = (ctypes.c_void_p * max(1, len(ins)))(*[x.ctypes.data for x in ins])
    out_ptrs = (ctypes.c_void_p * len(outs))(*[x.ctypes.data for x in outs])
    getattr(lib, f"run_{i}")(in_ptrs, out_ptrs)
    return outs


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"u{x.dtype.itemsize}")) if x.dtype.kind not in "b" else x


@pytest.mark.parametrize("i", range(len(CASES)), ids=[c.name for c in CASES])
def test_matches_interpreter(compiled: ctypes.CDLL, i: int) -> None:
    case = CASES[i]
    got = _run(compiled, i, case)
    want = interpreter.run(case.module, *case.inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        if case.rtol == 0 and case.atol == 0:
            np.testing.assert_array_equal(_bits(g), _bits(w))
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                       rtol=case.rtol, atol=case.atol)


DOT_INDICES = [i for i, c in enumerate(CASES) if c.name.startswith("dot_")]


@pytest.mark.parametrize("i", DOT_INDICES, ids=[CASES[i].name for i in DOT_INDICES])
def test_dot_own_gemm_matches_interpreter(compiled: ctypes.CDLL, i: int) -> None:
    """With the BLAS pointers null, every dot runs our own GEMM (the fallback) correctly."""
    case = CASES[i]
    blas.unbind(compiled)
    try:
        got = _run(compiled, i, case)
    finally:
        blas.bind(compiled)
    want = interpreter.run(case.module, *case.inputs)
    for g, w in zip(got, want, strict=True):
        if case.rtol == 0 and case.atol == 0:
            np.testing.assert_array_equal(_bits(g), _bits(w))
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                       rtol=case.rtol, atol=case.atol)


def test_dot_f32_is_not_exact_by_accident(compiled: ctypes.CDLL) -> None:
    """The large dot really ran the blocked kernel: its result differs from a wrong one."""
    i = next(j for j, c in enumerate(CASES) if c.name == "dot_blocked")
    got = _run(compiled, i, CASES[i])[0]
    a, b = CASES[i].inputs
    assert np.abs(got - a @ b).max() < 1e-3
    assert np.abs(got - (a @ b).T.T[::-1]).max() > 1e-2


def test_unsupported_op_names_the_instruction() -> None:
    module = parse("""
ENTRY e {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
}""")
    with pytest.raises(CompileError, match="n"):
        library.emit(library_op(module.entry.root), ["in0"], ["out0"], set())
    assert module.entry.root.opcode not in library.SUPPORTED


def test_the_cpu_library_implements_every_library_op() -> None:
    """What the kernel IR lowers to library calls is the op table's (`LIBRARY_OPS`, plus jax's
    LAPACK custom calls); the cpu backend has a routine for each, and for nothing else."""
    from hlofuse.ir.opcodes import LIBRARY_OPS, Opcode

    assert LIBRARY_OPS | {Opcode.CUSTOM_CALL} == library.SUPPORTED


def test_scalar_function_and_reducer_kinds() -> None:
    from hlofuse.backends.kernel_ir import ir
    from hlofuse.backends.kernel_ir.lower.scalar import function, simple_reducer
    from hlofuse.ir.opcodes import Opcode

    module = parse("""
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(y, x)
}

argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  v = f32[] select(gt, v0, v1)
  i = s32[] select(gt, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}

ENTRY e {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
}""")
    comps = {c.name: c for c in module.computations_post_order()}
    # `add` may be reassociated (vectorized partial sums); a variadic argmax reducer may not
    assert simple_reducer(comps["add"]) is Opcode.ADD
    assert simple_reducer(comps["argmax"]) is None
    text = scalar.c_function(function(ir.Graph(), comps["argmax"], "argmax"), "argmax_fn")
    assert "static inline void argmax_fn(float p0, int32_t p1, float p2, int32_t p3, " \
           "float *r0, int32_t *r1)" in text
