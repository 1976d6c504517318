"""Unit tests of the reference interpreter (hlofuse.backends.interpreter): elementwise
semantics, errors and the public API, rng-bit-generator.

Modules are written in HLO text. Expected values are worked out by hand from XLA's semantics
(integer division/remainder/shift edge cases, float->int convert, total-order compare,
rounding, sign of -0 and nan, ...). Data movement, reductions, control flow, gather/scatter and
sort are in test_interpreter_ops.py; cross-checks against jax.jit in test_interpreter_jax.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.backends import interpreter
from hlofuse.backends.interpreter import SUPPORTED
from hlofuse.errors import InputError, InterpreterError
from hlofuse.ir.opcodes import Opcode
from hlofuse.text import parse
from interpreter_helpers import I32_MAX, I32_MIN, binary, f32, i32, run, same_bits, unary

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


def test_subnormals_flush_as_xla_cpu_or_keep_as_ieee() -> None:
    # subnormals="flush" (the default) is XLA's CPU runtime (DAZ/FTZ); "keep" is IEEE 754, like
    # numpy. Bit moves keep subnormals either way (tests/test_subnormals.py against jax.jit).
    tiny = f32(1e-40)
    assert unary("sign", "f32[1]", "f32[1]", tiny).tolist() == [0.0]
    assert unary("convert", "f32[1]", "pred[1]", tiny).tolist() == [False]
    assert binary("multiply", "f32[1]", "f32[1]", tiny, f32(0.5))[0] == 0
    assert unary("negate", "f32[1]", "f32[1]", tiny)[0] == -tiny[0]
    assert unary("convert", "f32[1]", "bf16[1]", tiny)[0] != 0
    assert unary("bitcast-convert", "f32[1]", "s32[1]", tiny)[0] == tiny.view(np.int32)[0]
    rem = binary("remainder", "f32[2]", "f32[2]", f32(1e-40, 1.0), f32(1.0, 1e-40))
    assert rem[0] == np.float32(1e-40) and np.isnan(rem[1])  # only the divisor flushes

    def keep(text: str, *args: np.ndarray) -> np.ndarray:
        return interpreter.run(parse("HloModule t\n\n" + text), *args, subnormals="keep")[0]

    sign = "ENTRY e {\n  p = f32[1] parameter(0)\n  ROOT r = f32[1] sign(p)\n}\n"
    assert keep(sign, tiny).tolist() == [1.0]
    mul = ("ENTRY e {\n  a = f32[1] parameter(0)\n  b = f32[1] parameter(1)\n"
           "  ROOT r = f32[1] multiply(a, b)\n}\n")
    assert keep(mul, tiny, f32(0.5))[0] == np.float32(5e-41)


def test_evaluate_returns_nested_tuples_and_run_flattens() -> None:
    module = parse("""HloModule t

ENTRY main {
  a = f32[2] parameter(0)
  n = f32[2] negate(a)
  inner = (f32[2], f32[2]) tuple(a, n)
  ROOT t = ((f32[2], f32[2]), f32[2]) tuple(inner, n)
}
""")
    x = f32(1, 2)
    value = interpreter.evaluate(module, [x])
    assert isinstance(value, tuple) and isinstance(value[0], tuple)
    assert [v.tolist() for v in interpreter.run(module, x)] == [[1, 2], [-1, -2], [-1, -2]]
    root = interpreter.evaluate_computation(module.entry, [x])
    assert root[1].tolist() == [-1, -2]


def test_bad_attributes_name_the_instruction() -> None:
    module = parse("""HloModule t

ENTRY e {
  x = f32[1,4,2] parameter(0)
  k = f32[3,2,2] parameter(1)
  ROOT c = f32[1,2,2] convolution(x, k), window={size=3}, dim_labels=b0f_0io->b0f
}
""")
    module.entry.root.attrs["dim_labels"] = "bxf_0io->b0f"  # what the verifier would reject
    args = (np.zeros((1, 4, 2), np.float32), np.zeros((3, 2, 2), np.float32))
    msg = r"cannot interpret convolution \(instruction c in e\): malformed dim_labels"
    with pytest.raises(InterpreterError, match=msg):
        interpreter.run(module, *args)
    module.entry.root.attrs["dim_labels"] = "b0f_0io->b0f"
    module.entry.root.attrs["feature_group_count"] = 3  # 2 features cannot split in 3
    with pytest.raises(InterpreterError, match=r"\(instruction c in e\): feature_group_count=3"):
        interpreter.run(module, *args)
