"""Unit tests of the reference interpreter (hlofuse.backends.interpreter).

Modules are written in HLO text. Expected values are worked out by hand from XLA's semantics
(integer division/remainder/shift edge cases, float->int convert, total-order compare,
rounding, sign of -0 and nan, ...). Ops that real JAX programs rarely emit in tests/programs.py
(convolution, select-and-scatter, reduce-precision, batched gather/scatter, ...) are also
checked against jax.jit on small inputs (skipped without jax).
"""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.backends import interpreter
from hlofuse.backends.interpreter import SUPPORTED
from hlofuse.errors import InputError, InterpreterError
from hlofuse.ir.opcodes import Opcode
from hlofuse.text import parse

I32_MIN = np.iinfo(np.int32).min
I32_MAX = np.iinfo(np.int32).max


def run(text: str, *args: np.ndarray) -> list[np.ndarray]:
    return interpreter.run(parse("HloModule t\n\n" + text), *args)


def unary(op: str, src: str, dst: str, x: np.ndarray, attrs: str = "") -> np.ndarray:
    extra = f", {attrs}" if attrs else ""
    text = f"ENTRY e {{\n  p = {src} parameter(0)\n  ROOT r = {dst} {op}(p){extra}\n}}\n"
    return run(text, x)[0]


def binary(
    op: str, src: str, dst: str, a: np.ndarray, b: np.ndarray, attrs: str = ""
) -> np.ndarray:
    extra = f", {attrs}" if attrs else ""
    text = (
        f"ENTRY e {{\n  a = {src} parameter(0)\n  b = {src} parameter(1)\n"
        f"  ROOT r = {dst} {op}(a, b){extra}\n}}\n"
    )
    return run(text, a, b)[0]


def i32(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int32)


def f32(*v: float) -> np.ndarray:
    return np.array(v, dtype=np.float32)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ----- integer semantics ------------------------------------------------------------------


def test_signed_divide_and_remainder_edge_cases() -> None:
    a = i32(7, -7, 7, -7, I32_MIN, 5, -5, I32_MIN)
    b = i32(2, 2, -2, -2, -1, 0, 0, 0)
    assert binary("divide", "s32[8]", "s32[8]", a, b).tolist() == [
        3, -3, -3, 3, I32_MIN, -1, -1, -1
    ]
    assert binary("remainder", "s32[8]", "s32[8]", a, b).tolist() == [
        1, -1, 1, -1, 0, 5, -5, I32_MIN
    ]


def test_unsigned_divide_and_remainder_by_zero() -> None:
    a = np.array([7, 9, 0], np.uint32)
    b = np.array([2, 0, 0], np.uint32)
    assert binary("divide", "u32[3]", "u32[3]", a, b).tolist() == [3, 0xFFFFFFFF, 0xFFFFFFFF]
    assert binary("remainder", "u32[3]", "u32[3]", a, b).tolist() == [1, 9, 0]


def test_float_remainder_is_fmod() -> None:
    r = binary("remainder", "f32[3]", "f32[3]", f32(5.5, -5.5, 5.5), f32(2, 2, -2))
    assert r.tolist() == [1.5, -1.5, 1.5]


def test_shifts_by_bit_width_or_more() -> None:
    a = i32(1, 1, -8, 8, -1, -1, -8)
    s = i32(3, 32, 40, 40, 28, 32, -1)
    assert binary("shift-left", "s32[7]", "s32[7]", a, s).tolist() == [8, 0, 0, 0, -268435456,
                                                                       0, 0]
    assert binary("shift-right-arithmetic", "s32[7]", "s32[7]", a, s).tolist() == [
        0, 0, -1, 0, -1, -1, -1
    ]
    assert binary("shift-right-logical", "s32[7]", "s32[7]", a, s).tolist() == [
        0, 0, 0, 0, 15, 0, 0
    ]


def test_integer_wraparound_abs_negate() -> None:
    assert binary("add", "s32[1]", "s32[1]", i32(I32_MAX), i32(1)).tolist() == [I32_MIN]
    assert binary("multiply", "s32[1]", "s32[1]", i32(65536), i32(65536)).tolist() == [0]
    assert unary("abs", "s32[2]", "s32[2]", i32(I32_MIN, -3)).tolist() == [I32_MIN, 3]
    assert unary("negate", "s32[2]", "s32[2]", i32(I32_MIN, 3)).tolist() == [I32_MIN, -3]
    u = np.array([250, 3], np.uint8)
    assert binary("add", "u8[2]", "u8[2]", u, u).tolist() == [244, 6]
    assert binary("subtract", "u8[2]", "u8[2]", np.array([1, 0], np.uint8), u).tolist() == [7, 253]


def test_integer_power() -> None:
    a = i32(2, 2, 1, -1, 0, 3, -2, 5)
    b = i32(10, -1, -5, -3, 0, 3, 3, 0)
    assert binary("power", "s32[8]", "s32[8]", a, b).tolist() == [1024, 0, 1, 0, 1, 27, -8, 1]
    assert binary("power", "s32[1]", "s32[1]", i32(3), i32(21)).tolist() == [
        int(np.int64(3**21).astype(np.int32))
    ]


def test_minimum_maximum_and_bitwise() -> None:
    assert binary("maximum", "s32[2]", "s32[2]", i32(-1, 5), i32(2, 3)).tolist() == [2, 5]
    u = np.array([0xF0, 0x0F], np.uint8)
    assert binary("xor", "u8[2]", "u8[2]", u, u[::-1].copy()).tolist() == [0xFF, 0xFF]
    assert unary("not", "u8[2]", "u8[2]", u).tolist() == [0x0F, 0xF0]
    p = np.array([True, False])
    assert unary("not", "pred[2]", "pred[2]", p).tolist() == [False, True]
    assert binary("add", "pred[2]", "pred[2]", p, p).tolist() == [True, False]


def test_popcnt_and_count_leading_zeros() -> None:
    x = i32(0, 1, -1, 0x10000)
    assert unary("popcnt", "s32[4]", "s32[4]", x).tolist() == [0, 1, 32, 1]
    assert unary("count-leading-zeros", "s32[4]", "s32[4]", x).tolist() == [32, 31, 0, 15]
    u8 = np.array([0, 1, 128, 15], np.uint8)
    assert unary("count-leading-zeros", "u8[4]", "u8[4]", u8).tolist() == [8, 7, 0, 4]


# ----- floats: rounding, sign, convert, compare -------------------------------------------


def test_rounding_modes() -> None:
    x = f32(0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.3, np.inf)
    afz = unary("round-nearest-afz", "f32[8]", "f32[8]", x)
    even = unary("round-nearest-even", "f32[8]", "f32[8]", x)
    assert afz.tolist() == [1, 2, 3, -1, -3, 0, 0, np.inf]
    assert even.tolist() == [0, 2, 2, 0, -2, 0, 0, np.inf]
    assert np.signbit(afz[6]) and np.signbit(even[3])  # -0.3 -> -0, -0.5 -> -0


def test_sign_of_zero_nan_and_integers() -> None:
    s = unary("sign", "f32[5]", "f32[5]", f32(-0.0, 0.0, np.nan, -3, 2))
    assert np.signbit(s[0]) and not np.signbit(s[1]) and np.isnan(s[2])
    assert s[3:].tolist() == [-1, 1]
    assert unary("sign", "s32[3]", "s32[3]", i32(-5, 0, 7)).tolist() == [-1, 0, 1]


def test_convert_float_to_int_saturates_and_maps_nan_to_zero() -> None:
    x = f32(np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7, -2.7)
    assert unary("convert", "f32[7]", "s32[7]", x).tolist() == [
        0, I32_MAX, I32_MIN, I32_MAX, I32_MIN, 2, -2
    ]
    assert unary("convert", "f32[4]", "u8[4]", f32(-1, 300, 2.9, np.nan)).tolist() == [
        0, 255, 2, 0
    ]


def test_convert_to_and_from_pred() -> None:
    p = unary("convert", "f32[4]", "pred[4]", f32(0.0, -0.0, np.nan, 0.1))
    assert p.tolist() == [False, False, True, True]
    assert unary("convert", "s32[3]", "pred[3]", i32(0, 2, -1)).tolist() == [False, True, True]
    assert unary("convert", "pred[2]", "f32[2]", np.array([True, False])).tolist() == [1.0, 0.0]


def test_convert_to_bf16_and_f16_rounds_to_nearest_even() -> None:
    import ml_dtypes

    x = f32(1 + 2**-8, 1 + 3 * 2**-8, 65520.0)
    b = unary("convert", "f32[3]", "bf16[3]", x)
    assert b.dtype == ml_dtypes.bfloat16
    assert b.astype(np.float32).tolist() == [1.0, 1 + 2**-6, 65536.0]
    h = unary("convert", "f32[2]", "f16[2]", f32(1 + 2**-11, 65520.0))
    assert h.astype(np.float32).tolist() == [1.0, np.inf]


def test_bf16_arithmetic_rounds_each_result() -> None:
    import ml_dtypes

    a = np.array([1.0, 3.0], ml_dtypes.bfloat16)
    b = np.array([2**-8, 2**-7], ml_dtypes.bfloat16)
    r = binary("add", "bf16[2]", "bf16[2]", a, b)
    assert r.astype(np.float32).tolist() == [1.0, 3.0]  # ties to even at bf16 precision


def test_compare_total_order_and_float_semantics() -> None:
    neg_nan = np.array(-np.nan, np.float32)
    neg_nan = np.copysign(np.float32(np.nan), np.float32(-1)).astype(np.float32)
    a = np.array([-0.0, np.nan, neg_nan, -np.inf, 1.0], np.float32)
    b = np.array([0.0, np.inf, -np.inf, neg_nan, 1.0], np.float32)
    lt = binary("compare", "f32[5]", "pred[5]", a, b, "direction=LT, type=TOTALORDER")
    assert lt.tolist() == [True, False, True, False, False]
    eq = binary("compare", "f32[5]", "pred[5]", a, b, "direction=EQ, type=TOTALORDER")
    assert eq.tolist() == [False, False, False, False, True]
    feq = binary("compare", "f32[5]", "pred[5]", a, b, "direction=EQ")
    assert feq.tolist() == [True, False, False, False, True]
    fne = binary("compare", "f32[5]", "pred[5]", a, a, "direction=NE")
    assert fne.tolist() == [False, True, True, False, False]


def test_compare_integer_directions() -> None:
    a, b = i32(1, 2, 3), i32(2, 2, 2)
    expect = {
        "EQ": [False, True, False], "NE": [True, False, True], "LT": [True, False, False],
        "LE": [True, True, False], "GT": [False, False, True], "GE": [False, True, True],
    }
    for d, want in expect.items():
        assert binary("compare", "s32[3]", "pred[3]", a, b, f"direction={d}").tolist() == want
    u = np.array([0xFFFFFFFF, 1], np.uint32)
    lt = binary("compare", "u32[2]", "pred[2]", u, u[::-1].copy(), "direction=LT")
    assert lt.tolist() == [False, True]


def test_select_and_clamp() -> None:
    text = """
ENTRY e {
  p = pred[3] parameter(0)
  a = f32[3] parameter(1)
  b = f32[3] parameter(2)
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  s = f32[3] select(p, a, b)
  ROOT c = f32[3] clamp(lo, s, hi)
}
"""
    (r,) = run(text, np.array([True, False, True]), f32(-1, 5, np.nan), f32(2, 0.5, 3))
    assert r[:2].tolist() == [0.0, 0.5] and np.isnan(r[2])


def test_bitcast_convert_same_and_different_widths() -> None:
    f = unary("bitcast-convert", "f32[2]", "u32[2]", f32(1.0, -2.0))
    assert f.tolist() == [0x3F800000, 0xC0000000]
    b = unary("bitcast-convert", "u32[2]", "u8[2,4]", np.array([0x01020304, 0xA0B0C0D0], np.uint32))
    assert b.tolist() == [[4, 3, 2, 1], [0xD0, 0xC0, 0xB0, 0xA0]]
    back = unary("bitcast-convert", "u8[2,4]", "u32[2]", b)
    assert back.tolist() == [0x01020304, 0xA0B0C0D0]
    s = unary("bitcast-convert", "u32[]", "f32[]", np.array(0x40490FDB, np.uint32))
    assert s.shape == () and abs(float(s) - np.pi) < 1e-6


def test_reduce_precision_matches_f16_rounding_and_flushes() -> None:
    x = f32(1.0001, 1e6, 1e-8, np.nan, -np.inf, 0.1)
    r = unary("reduce-precision", "f32[6]", "f32[6]", x, "exponent_bits=5, mantissa_bits=10")
    with np.errstate(over="ignore"):
        expect = x.astype(np.float16).astype(np.float32)
    expect[2] = 0.0  # f16 keeps 1e-8 as 0 too; denormals of the reduced type flush to zero
    assert np.array_equal(r, expect, equal_nan=True)


def test_transcendentals_and_special_functions() -> None:
    assert unary("cbrt", "f32[2]", "f32[2]", f32(-8, 27)).tolist() == [-2, 3]
    assert unary("is-finite", "f32[3]", "pred[3]", f32(1, np.inf, np.nan)).tolist() == [
        True, False, False
    ]
    assert abs(float(unary("erf", "f32[1]", "f32[1]", f32(0.5))[0]) - 0.5204999) < 1e-6
    lg = unary("logistic", "f32[3]", "f32[3]", f32(0, -200, 200))
    assert lg.tolist() == [0.5, 0.0, 1.0]
    assert unary("exponential-minus-one", "f32[1]", "f32[1]", f32(1e-10)).tolist() == [
        pytest.approx(1e-10)
    ]
    assert float(unary("rsqrt", "f32[1]", "f32[1]", f32(4))[0]) == 0.5
    assert float(binary("atan2", "f32[1]", "f32[1]", f32(1), f32(-1))[0]) == pytest.approx(
        3 * np.pi / 4
    )


# ----- data movement ----------------------------------------------------------------------


def test_broadcast_maps_operand_dims_including_transposition() -> None:
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    r = unary("broadcast", "s32[2,3]", "s32[3,4,2]", x, "dimensions={2,0}")
    assert r.shape == (3, 4, 2)
    assert np.array_equal(r[:, 1, :], x.T)
    s = unary("broadcast", "s32[]", "s32[2,2]", np.array(7, np.int32), "dimensions={}")
    assert s.tolist() == [[7, 7], [7, 7]]


def test_reshape_transpose_reverse_slice() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(unary("reshape", "f32[3,4]", "f32[2,6]", x), x.reshape(2, 6))
    assert np.array_equal(unary("transpose", "f32[3,4]", "f32[4,3]", x, "dimensions={1,0}"), x.T)
    assert np.array_equal(unary("reverse", "f32[3,4]", "f32[3,4]", x, "dimensions={0,1}"),
                          x[::-1, ::-1])
    sl = unary("slice", "f32[3,4]", "f32[2,2]", x, "slice={[0:3:2], [1:4:2]}")
    assert sl.tolist() == [[1, 3], [9, 11]]


def test_bitcast_is_reshape_with_default_layouts_only() -> None:
    x = np.arange(6, dtype=np.int32)
    assert unary("bitcast", "s32[6]{0}", "s32[2,3]{1,0}", x).tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(InterpreterError, match=r"bitcast.*instruction r in e.*layout"):
        unary("bitcast", "s32[6]{0}", "s32[2,3]{0,1}", x)


def test_dynamic_slice_and_update_clamp_start_indices() -> None:
    text = """
ENTRY e {
  x = s32[5] parameter(0)
  i = s32[] parameter(1)
  ds = s32[2] dynamic-slice(x, i), dynamic_slice_sizes={2}
  u = s32[2] constant({-1, -2})
  dus = s32[5] dynamic-update-slice(x, u, i)
  ROOT t = (s32[2], s32[5]) tuple(ds, dus)
}
"""
    x = i32(0, 1, 2, 3, 4)
    for start, ds, dus in [
        (10, [3, 4], [0, 1, 2, -1, -2]),
        (-3, [0, 1], [-1, -2, 2, 3, 4]),
        (1, [1, 2], [0, -1, -2, 3, 4]),
    ]:
        got = run(text, x, np.array(start, np.int32))
        assert got[0].tolist() == ds and got[1].tolist() == dus


def test_pad_with_negative_and_interior_padding() -> None:
    text = """
ENTRY e {
  x = s32[3] parameter(0)
  z = s32[] constant(0)
  ROOT p = s32[6] pad(x, z), padding=-1_2_1
}
"""
    # interior: [1,0,2,0,3]; crop 1 low -> [0,2,0,3]; 2 high -> [0,2,0,3,0,0]
    assert run(text, i32(1, 2, 3))[0].tolist() == [0, 2, 0, 3, 0, 0]


def test_concatenate_and_iota() -> None:
    text = """
ENTRY e {
  a = s32[2] parameter(0)
  b = s32[1] parameter(1)
  c = s32[3] concatenate(a, b), dimensions={0}
  io = s32[2,3] iota(), iota_dimension=1
  f = f32[3] iota(), iota_dimension=0
  ROOT t = (s32[3], s32[2,3], f32[3]) tuple(c, io, f)
}
"""
    c, io, f = run(text, i32(1, 2), i32(3))
    assert c.tolist() == [1, 2, 3]
    assert io.tolist() == [[0, 1, 2], [0, 1, 2]]
    assert f.tolist() == [0.0, 1.0, 2.0]


# ----- reductions, dot --------------------------------------------------------------------

ADD_F32 = """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
"""

ARGMAX = """
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  eq = pred[] compare(v0, v1), direction=EQ
  lt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt)
  take0 = pred[] or(gt, tie)
  v = f32[] select(take0, v0, v1)
  i = s32[] select(take0, i0, i1)
  ROOT r = (f32[], s32[]) tuple(v, i)
}
"""


def test_reduce_sum_with_init_and_empty_dimension() -> None:
    text = ADD_F32 + """
ENTRY e {
  x = f32[2,3] parameter(0)
  one = f32[] constant(1)
  ROOT r = f32[2] reduce(x, one), dimensions={1}, to_apply=add
}
"""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert run(text, x)[0].tolist() == [4.0, 13.0]
    empty = text.replace("f32[2,3]", "f32[2,0]")
    assert run(empty, np.zeros((2, 0), np.float32))[0].tolist() == [1.0, 1.0]


def test_variadic_reduce_argmax_picks_first_maximum() -> None:
    text = ARGMAX + """
ENTRY e {
  x = f32[2,5] parameter(0)
  io = s32[2,5] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[2], s32[2]) reduce(x, io, ninf, zero), dimensions={1}, to_apply=argmax
}
"""
    x = f32(1, 7, 3, 7, 0, -1, -2, -3, -4, -5).reshape(2, 5)
    v, i = run(text, x)
    assert v.tolist() == [7.0, -1.0] and i.tolist() == [1, 0]


def test_reduce_window_sum_with_stride_and_padding() -> None:
    text = ADD_F32 + """
ENTRY e {
  x = f32[5] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[3] reduce-window(x, z), window={size=3 stride=2 pad=1_1}, to_apply=add
}
"""
    # padded [0,1,2,3,4,5,0]; windows at 0,2,4: 0+1+2, 2+3+4, 4+5+0
    assert run(text, f32(1, 2, 3, 4, 5))[0].tolist() == [3.0, 9.0, 9.0]


def test_dot_general_batch_and_contracting_dims() -> None:
    text = """
ENTRY e {
  a = f32[2,3,4] parameter(0)
  b = f32[2,4,5] parameter(1)
  ROOT d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2},
      rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(run(text, a, b)[0], a @ b, rtol=1e-6)
    ints = """
ENTRY e {
  a = s8[2,2] parameter(0)
  b = s8[2,2] parameter(1)
  ROOT d = s32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    x = np.array([[127, 127], [-128, 1]], np.int8)
    assert run(ints, x, x)[0].tolist() == [[127 * 127 - 128 * 127, 127 * 127 + 127],
                                           [-128 * 127 - 128, -128 * 127 + 1]]


def test_convolution_1d_against_numpy() -> None:
    text = """
ENTRY e {
  x = f32[1,6,2] parameter(0)
  k = f32[3,2,4] parameter(1)
  ROOT c = f32[1,2,4] convolution(x, k), window={size=3 stride=2}, dim_labels=b0f_0io->b0f
}
"""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 6, 2)).astype(np.float32)
    k = rng.standard_normal((3, 2, 4)).astype(np.float32)
    want = np.stack([np.einsum("wc,wco->o", x[0, s : s + 3], k) for s in (0, 2)])[None]
    np.testing.assert_allclose(run(text, x, k)[0], want, rtol=1e-5)


# ----- control flow -----------------------------------------------------------------------


def test_while_call_and_fusion() -> None:
    text = """
cond {
  s = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}

double {
  x = f32[] parameter(0)
  ROOT d = f32[] add(x, x)
}

fused {
  a = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT b = s32[] add(a, one)
}

body {
  s = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[] get-tuple-element(s), index=1
  i1 = s32[] fusion(i), kind=kLoop, calls=fused
  x2 = f32[] call(x), to_apply=double
  ROOT t = (s32[], f32[]) tuple(i1, x2)
}

ENTRY e {
  x = f32[] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[]) tuple(z, x)
  ROOT w = (s32[], f32[]) while(init), condition=cond, body=body
}
"""
    i, x = run(text, np.array(1.5, np.float32))
    assert int(i) == 5 and float(x) == 48.0


def test_conditional_pred_and_index_with_out_of_range_index() -> None:
    branches = """
b0 {
  x = f32[] parameter(0)
  ROOT r = f32[] negate(x)
}

b1 {
  x = f32[] parameter(0)
  ROOT r = f32[] add(x, x)
}

b2 {
  x = f32[] parameter(0)
  ROOT r = f32[] multiply(x, x)
}
"""
    indexed = branches + """
ENTRY e {
  i = s32[] parameter(0)
  x = f32[] parameter(1)
  ROOT c = f32[] conditional(i, x, x, x), branch_computations={b0, b1, b2}
}
"""
    x = np.array(3.0, np.float32)
    got = [float(run(indexed, np.array(i, np.int32), x)[0]) for i in (0, 1, 2, 7, -1)]
    assert got == [-3.0, 6.0, 9.0, 9.0, 9.0]
    pred = branches + """
ENTRY e {
  p = pred[] parameter(0)
  x = f32[] parameter(1)
  ROOT c = f32[] conditional(p, x, x), true_computation=b1, false_computation=b0
}
"""
    assert float(run(pred, np.array(True), x)[0]) == 6.0
    assert float(run(pred, np.array(False), x)[0]) == -3.0


def test_map_applies_scalar_computation() -> None:
    text = ADD_F32 + """
ENTRY e {
  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  ROOT m = f32[3] map(a, b), dimensions={0}, to_apply=add
}
"""
    assert run(text, f32(1, 2, 3), f32(10, 20, 30))[0].tolist() == [11, 22, 33]


def test_tokens_barrier_and_ids() -> None:
    text = """
ENTRY e {
  x = f32[2] parameter(0)
  tok = token[] after-all()
  d = f32[2] add-dependency(x, tok)
  b = f32[2] opt-barrier(d)
  pid = u32[] partition-id()
  ROOT t = (f32[2], u32[]) tuple(b, pid)
}
"""
    x, pid = run(text, f32(1, 2))
    assert x.tolist() == [1, 2] and int(pid) == 0


# ----- gather, scatter, sort --------------------------------------------------------------


def test_gather_rows_with_clamped_start_indices() -> None:
    text = """
ENTRY e {
  x = f32[4,2] parameter(0)
  i = s32[3,1] parameter(1)
  ROOT g = f32[3,2] gather(x, i), offset_dims={1}, collapsed_slice_dims={0},
      start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}
}
"""
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    got = run(text, x, np.array([[2], [9], [-5]], np.int32))[0]
    assert got.tolist() == [[4, 5], [6, 7], [0, 1]]


SCATTER = """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

second {
  x = f32[] parameter(0)
  ROOT y = f32[] parameter(1)
}

ENTRY e {
  x = f32[5] parameter(0)
  i = s32[4,1] parameter(1)
  u = f32[4] parameter(2)
  ROOT s = f32[5] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=COMBINER
}
"""


def test_scatter_add_combines_duplicates_and_skips_out_of_bounds() -> None:
    x = np.zeros(5, np.float32)
    idx = np.array([[1], [1], [7], [-1]], np.int32)
    got = run(SCATTER.replace("COMBINER", "add"), x, idx, f32(1, 2, 4, 8))[0]
    assert got.tolist() == [0, 3, 0, 0, 0]
    got = run(SCATTER.replace("COMBINER", "second"), x, np.array([[0], [2], [2], [4]], np.int32),
              f32(1, 2, 3, 4))[0]
    assert got.tolist() == [1, 0, 3, 0, 4]


def test_scatter_window_partly_out_of_bounds_is_skipped() -> None:
    text = """
add {
  x = s32[] parameter(0)
  y = s32[] parameter(1)
  ROOT s = s32[] add(x, y)
}

ENTRY e {
  x = s32[5] parameter(0)
  i = s32[2] parameter(1)
  u = s32[2,2] parameter(2)
  ROOT s = s32[5] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
"""
    got = run(text, np.zeros(5, np.int32), i32(1, 4), np.array([[1, 2], [3, 4]], np.int32))[0]
    assert got.tolist() == [0, 1, 2, 0, 0]


def test_sort_variadic_stable_with_key_comparator() -> None:
    text = """
cmp {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = f32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}

ENTRY e {
  k = s32[6] parameter(0)
  v = f32[6] parameter(1)
  ROOT s = (s32[6], f32[6]) sort(k, v), dimensions={0}, is_stable=true, to_apply=cmp
}
"""
    k, v = run(text, i32(3, 1, 3, 0, 1, 3), f32(0, 1, 2, 3, 4, 5))
    assert k.tolist() == [0, 1, 1, 3, 3, 3] and v.tolist() == [3, 1, 4, 0, 2, 5]
    k, v = run(text.replace("direction=LT", "direction=GT"), i32(3, 1, 3, 0, 1, 3),
               f32(0, 1, 2, 3, 4, 5))
    assert k.tolist() == [3, 3, 3, 1, 1, 0] and v.tolist() == [0, 2, 5, 1, 4, 3]


def test_sort_lexicographic_comparator_uses_network() -> None:
    text = """
cmp {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  lt0 = pred[] compare(a, b), direction=LT
  eq0 = pred[] compare(a, b), direction=EQ
  gt1 = pred[] compare(c, d), direction=GT
  second = pred[] and(eq0, gt1)
  ROOT r = pred[] or(lt0, second)
}

ENTRY e {
  k = s32[3,7] parameter(0)
  v = s32[3,7] parameter(1)
  ROOT s = (s32[3,7], s32[3,7]) sort(k, v), dimensions={1}, is_stable=true, to_apply=cmp
}
"""
    rng = np.random.default_rng(3)
    k = rng.integers(0, 3, (3, 7)).astype(np.int32)
    v = rng.integers(0, 4, (3, 7)).astype(np.int32)
    sk, sv = run(text, k, v)
    for r in range(3):
        order = sorted(range(7), key=lambda j, r=r: (k[r, j], -v[r, j], j))
        assert sk[r].tolist() == k[r, order].tolist() and sv[r].tolist() == v[r, order].tolist()


# ----- errors and API ---------------------------------------------------------------------


def test_custom_call_error_names_target_and_instruction() -> None:
    text = """
ENTRY main.5 {
  x = f32[2] parameter(0)
  ROOT custom-call.3 = f32[2] custom-call(x), custom_call_target="foo"
}
"""
    with pytest.raises(InterpreterError) as err:
        run(text, f32(1, 2))
    assert str(err.value) == (
        "cannot interpret custom-call 'foo' (instruction custom-call.3 in main.5): "
        "custom calls are opaque"
    )
    sharding = text.replace('"foo"', '"Sharding"')
    assert run(sharding, f32(1, 2))[0].tolist() == [1, 2]


def test_rng_op_is_rejected_with_reason() -> None:
    text = """
ENTRY e {
  a = f32[] constant(0)
  b = f32[] constant(1)
  ROOT r = f32[3] rng(a, b), distribution=rng_uniform
}
"""
    with pytest.raises(InterpreterError, match=r"cannot interpret rng \(instruction r in e\)"):
        run(text)


def test_check_args_count_shape_dtype() -> None:
    module = parse("""HloModule t

ENTRY main {
  Arg_0.1 = f32[8] parameter(0)
  Arg_1.2 = f32[8] parameter(1)
  ROOT s = f32[8] add(Arg_0.1, Arg_1.2)
}
""")
    x = np.zeros(8, np.float32)
    with pytest.raises(InputError, match="takes 2 argument"):
        interpreter.run(module, x)
    msg = r"parameter 1 \(Arg_1\.2\): expected f32\[8\], got f32\[4\]"
    with pytest.raises(InputError, match=msg):
        interpreter.run(module, x, np.zeros(4, np.float32))
    msg = r"parameter 0 \(Arg_0\.1\): expected f32\[8\], got f64\[8\]"
    with pytest.raises(InputError, match=msg):
        interpreter.run(module, np.zeros(8), x)
    with pytest.raises(InputError, match="got a Python float"):
        interpreter.check_args(module, [1.0, x])
    assert interpreter.evaluate(module, [x, x]).shape == (8,)


def test_supported_opcodes() -> None:
    assert isinstance(SUPPORTED, frozenset)
    must = {
        Opcode.ADD, Opcode.SORT, Opcode.GATHER, Opcode.SCATTER, Opcode.WHILE, Opcode.CONDITIONAL,
        Opcode.RNG_BIT_GENERATOR, Opcode.CONVOLUTION, Opcode.REDUCE_WINDOW, Opcode.FUSION,
        Opcode.SELECT_AND_SCATTER, Opcode.REDUCE_PRECISION, Opcode.MAP, Opcode.BITCAST,
    }
    assert must <= SUPPORTED
    assert Opcode.RNG not in SUPPORTED and Opcode.CUSTOM_CALL not in SUPPORTED


# ----- rng-bit-generator vs jax.lax.rng_bit_generator -------------------------------------

RNG_CASES = [((3, 5), "uint32"), ((7,), "uint32"), ((), "uint32"), ((4, 3), "uint16"),
             ((5,), "uint8"), ((2, 3), "uint64"), ((), "uint64")]


@pytest.mark.parametrize("algorithm", ["RNG_THREE_FRY", "RNG_PHILOX", "RNG_DEFAULT"])
@pytest.mark.parametrize("shape,dtype", RNG_CASES)
def test_rng_bit_generator_matches_jax(algorithm: str, shape: tuple, dtype: str) -> None:
    jax = pytest.importorskip("jax")
    from jax import lax

    alg = getattr(lax.RandomAlgorithm, algorithm)
    keys = [np.array([1, 2], np.uint64), np.array([0xDEADBEEF12345678, 2**64 - 2], np.uint64)]
    with jax.enable_x64(True):
        for key in keys:
            def f(k):
                return lax.rng_bit_generator(k, shape, dtype=np.dtype(dtype), algorithm=alg)

            text = jax.jit(f).lower(key).as_text(dialect="hlo")
            assert "rng-bit-generator(" in text
            got = interpreter.run(parse(text), key)
            want = [np.asarray(v) for v in jax.jit(f)(key)]
            for g, w in zip(got, want, strict=True):
                assert same_bits(g, w), (key, g, w)
