"""Regression tests for the differential fuzzer's disagreement classes (issue 29,
benchmarks/results/fuzz_findings.md): each minimized case and a few variants, run by jax.jit
(the oracle), the interpreter (the spec) and the cpu backend, all three compared."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from jax_oracle import BACKENDS, run_on, x64  # noqa: F401  (x64: an autouse fixture)


def check(f: Callable[..., Any], *args: np.ndarray, rtol: float = 1e-6,
          exact: bool = False) -> None:
    """Every backend gives jax.jit's values (NaN where it has NaN, same signs of zeros)."""
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(f)(*args))]
    for backend in BACKENDS:
        got = run_on(backend, f, args, pipeline="hlofuse")
        assert len(got) == len(want), backend
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype, backend
            if exact:  # bytes, except that any NaN matches a NaN (payloads are free)
                nan = np.isnan(w.astype(np.complex128)) if w.dtype.kind in "fcV" \
                    else np.zeros(w.shape, bool)
                if w.dtype != E8:
                    np.testing.assert_array_equal(np.isnan(g.astype(np.complex128)), nan,
                                                  err_msg=backend)
                    g, w = g[~nan], w[~nan]
                np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8),
                                              err_msg=backend)
                continue
            wide = np.complex128 if w.dtype.kind == "c" else np.float64
            np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol=rtol, atol=0,
                                       err_msg=backend)
            parts = (lambda a: (a.real, a.imag)) if w.dtype.kind == "c" else (lambda a: (a,))
            for gp, wp in zip(parts(g), parts(w), strict=True):
                zero = wp == 0
                np.testing.assert_array_equal(np.signbit(gp[zero]), np.signbit(wp[zero]),
                                              err_msg=f"{backend}: sign of zero")


# ----- class 6: power with a subnormal operand -----------------------------------------------
# XLA's CPU calls the C library's pow with DAZ set: special cases by the operands' bits, so a
# subnormal exponent is a nonzero non-integer and a subnormal base weighs 2^-150 / 2^-1075.


def _pow_cases(dt: Any) -> tuple[np.ndarray, np.ndarray]:
    tiny = float(np.finfo(np.float32 if dt is not np.float64 else np.float64).smallest_subnormal)
    if dt is ml_dtypes.bfloat16:
        tiny = 2.0 ** -133  # a bf16 subnormal (an f32 subnormal too)
    inf, nan = np.inf, np.nan
    pairs = [(-2.0, tiny), (-tiny, 0.3), (3 * tiny, 0.0186), (tiny, 0.5), (tiny, 1.0),
             (2.0, -tiny), (0.0, tiny), (-0.0, -tiny), (tiny, -1.0), (-tiny, 1.0),
             (-tiny, 2.0), (-tiny, -3.0), (1.0, tiny), (tiny, tiny), (-tiny, inf),
             (tiny, -inf), (inf, tiny), (-inf, -tiny), (nan, tiny), (tiny, 0.0), (-tiny, nan),
             (-1.0, tiny), (0.5, 3.0), (-2.0, 3.0)]
    return (np.array([p[0] for p in pairs], dt), np.array([p[1] for p in pairs], dt))


@pytest.mark.parametrize("dt", [np.float32, np.float64, ml_dtypes.bfloat16],
                         ids=["f32", "f64", "bf16"])
def test_power_subnormal_operands(dt: Any) -> None:
    a, b = _pow_cases(dt)
    check(lax.pow, a, b, rtol=1e-6 if dt is np.float64 else 1e-5 if dt is np.float32 else 1e-2)


def test_power_subnormal_minimized() -> None:
    """fuzz_min/000.hlo and seed2030/000.hlo: power(-2, 1e-310) is NaN, not 1."""
    a = np.array([[1.0, -2.0], [-5e-324, 1.5e-323]])
    b = np.array([[0.5, 1e-310], [0.3, 0.0186]])
    check(lax.pow, a, b)
    check(lax.pow, a.astype(np.float32), np.array([[0.5, 1e-40], [0.3, 0.0186]], np.float32),
          rtol=1e-5)


def test_power_keep_subnormals_is_ieee() -> None:
    """subnormals="keep": IEEE pow (numpy), on both backends."""
    a, b = _pow_cases(np.float64)
    with np.errstate(all="ignore"):
        want = np.power(a, b)
    for backend in BACKENDS:
        got = run_on(backend, lax.pow, (a, b), pipeline="hlofuse", subnormals="keep")[0]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=backend)


# ----- class 8: convolution padding with an inf or NaN in the kernel --------------------------
# XLA's elemental convolution (f64, c128, ...) skips padding and base-dilation holes; its
# runtime one (f16, bf16, f32, c64) multiplies their zeros by the kernel, except for transposed
# convolutions and tiny buffers (conv_plan.py `plan`).


def test_conv_padding_inf_kernel_minimized() -> None:
    """fuzz_min/003.hlo: f64, 2 feature groups, padding 6, lhs and rhs dilation 2."""
    x = np.arange(1.0, 5.0).reshape(1, 4, 1)  # batch 1, 4 features, width 1
    k = np.ones((2, 2, 3))
    k[0, 0, 0] = np.inf
    k[1, 1, 2] = np.nan

    def f(a: Any, b: Any) -> Any:
        return lax.conv_general_dilated(a, b, (1,), [(6, 6)], (2,), (2,),
                                        dimension_numbers=("NCW", "OIW", "NCW"),
                                        feature_group_count=2)

    check(f, x, k, rtol=1e-12)


CONV_CASES = [  # (spatial dims, padding, lhs dilation, rhs dilation, feature groups, stride)
    (1, 2, 1, 1, 1, 1), (2, 2, 1, 2, 1, 1), (1, 2, 2, 1, 1, 1), (2, 1, 2, 1, 1, 1),
    (3, 1, 2, 1, 1, 1), (3, 0, 2, 1, 1, 1), (2, 2, 1, 1, 2, 1), (1, 1, 1, 1, 1, 2),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(c) for c in CONV_CASES])
@pytest.mark.parametrize("dt", [np.float64, np.float32, np.float16, np.complex128, np.complex64],
                         ids=["f64", "f32", "f16", "c128", "c64"])
def test_conv_padding_inf_kernel(dt: Any, case: tuple[int, ...]) -> None:
    nd, pad, ld, rd, fg, stride = case
    x = np.ones((1, 2 * fg) + (4,) * nd, dt)
    k = np.ones((2 * fg, 2) + (3,) * nd, dt)
    k[(slice(None), slice(None)) + (0,) * nd] = np.inf

    def f(a: Any, b: Any) -> Any:
        return lax.conv_general_dilated(a, b, (stride,) * nd, [(pad, pad)] * nd, (ld,) * nd,
                                        (rd,) * nd, feature_group_count=fg)

    check(f, x, k, rtol=1e-3 if dt in (np.float16,) else 1e-5)


# ----- class 9: f8e8m0fnu 2^-127 (encoding 0) moved by the cpu backend ------------------------
# 2^-127 is an f32 subnormal: a float conversion under FTZ/DAZ read it as 0, stored as NaN.

E8 = ml_dtypes.float8_e8m0fnu
E8_CODES = np.array([0, 1, 127, 128, 200, 254, 255, 3, 0, 0, 9, 0], np.uint8).view(E8)

E8_MOVES: list[tuple[str, Callable[..., Any], int]] = [
    ("concatenate", lambda x, y: lax.concatenate([x, y], 0), 2),
    ("slice", lambda x: x[::2], 1),
    ("reverse", lambda x: x[::-1], 1),
    ("reshape-transpose", lambda x: x.reshape(3, 4).T, 1),
    ("pad", lambda x: lax.pad(x, E8(2.0), [(1, 2, 1)]), 1),
    ("dynamic-slice", lambda x: lax.dynamic_slice(x, (np.int32(3),), (5,)), 1),
    ("select", lambda x: lax.select(lax.iota(np.int32, 12) > 5, x, x[::-1]), 1),
    ("bitcast-convert to u8", lambda x: lax.bitcast_convert_type(x, np.uint8), 1),
    ("bitcast-convert from u8",
     lambda x: lax.bitcast_convert_type(lax.bitcast_convert_type(x, np.uint8), E8), 1),
]


@pytest.mark.parametrize("name,f,nargs", E8_MOVES, ids=[m[0] for m in E8_MOVES])
def test_e8m0_smallest_value_moves_exactly(name: str, f: Callable[..., Any], nargs: int) -> None:
    args = (E8_CODES, E8_CODES[:4])[:nargs]
    check(f, *args, exact=True)


E8_CONVERTS = [np.float32, np.float64, np.complex64, np.complex128, ml_dtypes.bfloat16]


@pytest.mark.parametrize("dt", E8_CONVERTS, ids=["f32", "f64", "c64", "c128", "bf16"])
def test_e8m0_converts_keep_smallest_value(dt: Any) -> None:
    """XLA converts e8m0 on the bits: 2^-127 to f32 stays 2^-127 (an f32 subnormal)."""
    check(lambda x: x.astype(dt), E8_CODES, exact=True)


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
def test_f32_subnormals_convert_to_e8m0_by_bits(dt: Any) -> None:
    x = np.array([2.0 ** -127, 1e-40, 1.5 * 2.0 ** -127, 2.0 ** -126, 1e-39, 3.0, -1.0, 0.0],
                 dt)
    check(lambda a: a.astype(E8), x, exact=True)


# ----- class 11: complex sign of a huge or tiny value ----------------------------------------
# XLA divides each part by |z|; a complex division by |z| + 0j underflowed 1 / |z| to 0.


@pytest.mark.parametrize("dt", [np.complex128, np.complex64], ids=["c128", "c64"])
def test_complex_sign_parts_divided_by_abs(dt: Any) -> None:
    part = np.finfo(np.float64 if dt is np.complex128 else np.float32)
    big, tiny = float(part.max), float(part.smallest_subnormal)
    vals = [complex(0, big), complex(tiny, big), complex(tiny, -big), complex(-0.0, 1e-30),
            complex(-tiny, 3.0), complex(big, big), complex(3, 4), 0j, complex(big / 2, -big / 3)]
    check(lax.sign, np.array(vals, dt), rtol=1e-6)


# ----- class 12: atan2 with a subnormal operand (real, and inside complex log and power) ------
# XLA's CPU calls the C library's atan2 / atan2f with DAZ set: glibc tests zeros, infinities
# and x = 1 (atan2f) on the bits, then computes on operands DAZ reads as zero
# (interpreter/flush.py `daz_atan2`).


def _atan2_cases(dt: Any) -> tuple[np.ndarray, np.ndarray]:
    f64 = dt is np.float64
    sub = 1e-310 if f64 else 1e-40
    small = 1e-300 if f64 else 1e-30
    vals = [sub, -sub, 3 * sub, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, np.inf, -np.inf, np.nan,
            small, -small, 2.0 ** -1000 if f64 else 1e-37, -(2.0 ** -1000) if f64 else -1e-37,
            2.0 ** -967 if f64 else 1e-10, -(2.0 ** -966) if f64 else -1e-10]
    ys, xs = zip(*[(y, x) for y in vals for x in vals], strict=True)
    return np.array(ys, dt), np.array(xs, dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64, ml_dtypes.bfloat16],
                         ids=["f32", "f64", "bf16"])
def test_atan2_subnormal_operands(dt: Any) -> None:
    y, x = _atan2_cases(dt)
    check(lax.atan2, y, x, rtol=1e-6 if dt is np.float64 else 1e-5 if dt is np.float32
          else 1e-2)


def test_f64_below_f32_normals_to_e8m0() -> None:
    """XLA's f64 -> e8m0 below 2^-126 (measured): 2^-127 exactly stays 2^-127, anything above
    it is 2^-126, anything below (zero and f64 subnormals included) is NaN."""
    t = 2.0 ** -127
    x = np.array([t, np.nextafter(t, 1), np.nextafter(t, 0), 1.5 * t, 1.99 * t, 2 * t,
                  0.75 * t, 0.5 * t, 2.0 ** -149, 2.0 ** -150, 1e-300, 5e-324, 0.0, -0.0, -t,
                  3.0, 1.5 * 2.0 ** -126, 2.0 ** 127, 2.0 ** 128, np.inf, np.nan])
    check(lambda a: a.astype(E8), x, exact=True)


@pytest.mark.parametrize("op,t,dt", [("atan2", "f32", np.float32), ("atan2", "f64", np.float64),
                                     ("power", "c64", np.complex64),
                                     ("power", "c128", np.complex128)])
def test_scalar_atan2_and_complex_power_stay_scalar(op: str, t: str, dt: type) -> None:
    """The DAZ atan2 rule read a 0-d operand's bits as a 1-element array, so a scalar atan2
    (with a subnormal operand) or complex power raised InterpreterError (20k fuzz run)."""
    from hlofuse.backends import interpreter
    from hlofuse.text import parse

    text = f"ENTRY e {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n" \
           f"  ROOT r = {t}[] {op}(a, b)\n}}"
    tiny = dt(1e-40) if t == "f32" else dt(1e-310)
    for a, b in [(tiny, dt(-2)), (dt(1.5), dt(0.5))]:
        (got,) = interpreter.run(parse(text), a, b)
        assert got.shape == () and got.dtype == np.dtype(dt)


# ----- 20k run: f4e2m1fn -> integer at the largest magnitude ----------------------------------
# XLA compares with the integer range's ends rounded into the source type; f4e2m1fn saturates
# 127 (and 7, 15, ...) to 6, so +-6 converts to the integer's max / min (measured: all 16 f4
# values to every integer type; unsigned types send the negatives to 0).

F4 = ml_dtypes.float4_e2m1fn
F4_ALL = np.arange(16, dtype=np.uint8).view(F4)  # every encoding: +-0 .. +-6, no NaN or inf
F4_INTS = [ml_dtypes.int4, np.int8, np.int16, np.int32, np.int64, ml_dtypes.uint4, np.uint8,
           np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("dt", F4_INTS, ids=lambda d: np.dtype(d).name)
def test_f4_to_int_saturates_at_largest_value(dt: Any) -> None:
    check(lambda x: x.astype(dt), F4_ALL, exact=True)
    check(lambda x, y: (x.astype(dt) + y, x.astype(np.float32)), F4_ALL,  # inside a fusion
          np.arange(16).astype(dt), exact=True)


# ----- 20k run: complex x complex dots with a real or integral result --------------------------
# XLA computes the dot in the operands' complex type (ResultCaster) and converts the sum:
# the real part, by the raw fptosi / fptoui a complex->integer convert emits (x86: NaN and
# out-of-range values give the signed minimum). The interpreter took the operands' real
# parts before multiplying (interpreter/complex_dot.py). Unsigned results are checked only
# where the sums are in range: AVX-512 hosts convert negatives to all ones, AVX2 ones wrap.

DOT_FORMS = {  # (lhs shape, rhs shape, dimension numbers)
    "vv": ((4,), (4,), (((0,), (0,)), ((), ()))),
    "mv": ((3, 4), (4,), (((1,), (0,)), ((), ()))),
    "mm": ((2, 4), (4, 3), (((1,), (0,)), ((), ()))),
    "batch": ((2, 3, 4), (2, 4, 3), (((2,), (1,)), ((0,), (0,)))),
}
COMPLEX_TO_REAL = [(np.complex64, t) for t in (np.float32, np.float64, np.int32, np.int64,
                                               np.uint32, np.uint64)] + \
                  [(np.complex128, t) for t in (np.float64, np.int64, np.uint64)]


def _cpu_or_refused(f: Callable[..., Any], args: tuple[np.ndarray, ...],
                    want: np.ndarray) -> None:
    """The cpu backend gives `want` or refuses the dot naming it."""
    from hlofuse.backends.cpu.cexpr import UnsupportedOpError

    try:
        (got,) = run_on("cpu", f, args, pipeline="hlofuse")
    except UnsupportedOpError as exc:
        assert "dot" in str(exc)
        return
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("form", DOT_FORMS)
@pytest.mark.parametrize("ct,pt", COMPLEX_TO_REAL,
                         ids=[f"{np.dtype(c).name}->{np.dtype(p).name}"
                              for c, p in COMPLEX_TO_REAL])
def test_complex_dot_real_result_is_real_part_of_complex_sum(form: str, ct: Any,
                                                             pt: Any) -> None:
    sa, sb, dn = DOT_FORMS[form]
    rng = np.random.default_rng(3)
    unsigned = np.dtype(pt).kind == "u"
    re_a = rng.integers(1 if unsigned else -6, 7, sa)
    re_b = rng.integers(1 if unsigned else -6, 7, sb)
    a = (re_a + 1j * rng.integers(-6, 7, sa) / (8 if unsigned else 1)).astype(ct)
    b = (re_b + 1j * rng.integers(-6, 7, sb) / (8 if unsigned else 1)).astype(ct)
    if not unsigned:  # NaN and overflow: the signed minimum for an integral result
        a.flat[0] = np.nan
        a.flat[-1] = 1e30 + 0j

    def f(x: Any, y: Any) -> Any:
        return lax.dot_general(x, y, dn, preferred_element_type=pt)

    want = np.asarray(jax.jit(f)(a, b))
    (got,) = run_on("interpreter", f, (a, b))
    assert got.dtype == want.dtype and got.shape == want.shape
    if np.dtype(pt).kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)
    _cpu_or_refused(f, (a, b), want)


# ----- 20k run: float scatter-add / scatter-mul with repeated indices -------------------------
# XLA applies the combiner once per update, in order, rounding to the type each time (a bf16 add
# computed in f32 and rounded); the interpreter combined in f64 and rounded once.


@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("dt", [ml_dtypes.bfloat16, np.float16, np.float32, np.float64],
                         ids=["bf16", "f16", "f32", "f64"])
@pytest.mark.parametrize("it", [np.int8, np.int16, np.int32], ids=["s8", "s16", "s32"])
def test_float_scatter_rounds_every_update(op: str, dt: Any, it: Any) -> None:
    rng = np.random.default_rng(2811)
    x = rng.standard_normal((4, 2)).astype(dt)
    idx = rng.integers(-1, 6, 24).astype(it)  # repeats, and out of range (clipped)
    upd = (rng.standard_normal((24, 2)) * (3 if op == "add" else 1)).astype(dt)

    def f(a: Any, i: Any, u: Any) -> Any:
        at = a.at[i]
        return at.add(u, mode="clip") if op == "add" else at.mul(u, mode="clip")

    check(f, x, idx, upd, exact=True)


# ----- 20k run: complex dots with infinite products ------------------------------------------
# XLA's CPU dot forms products with the plain formula (no C99 Annex G recovery: C's `*` on
# _Complex values turned (2-0.5i)(-inf-2i) into -inf+inf i) and Eigen's gemm scales the sum
# by alpha = 1 + 0i, so a part that is not finite makes the other one NaN; operands are first
# converted to the dot's complex type (an f64 1e39 of a c64 dot is inf). jax.jit's
# strength-reduced vector dots (no alpha) and Eigen's scalar path for c64 matrix-vector
# products with few rows (Annex G, how many rows depends on the host's vector width) differ.

def _parts(re: Any, im: Any, dt: Any) -> np.ndarray:
    x = np.zeros(np.broadcast(np.asarray(re), np.asarray(im)).shape, dt)
    x.real, x.imag = re, im
    return x


@pytest.mark.parametrize("form", ["mm", "batch"])
@pytest.mark.parametrize("lt,rt,pt", [(np.complex128, np.complex128, None),
                                      (np.complex64, np.complex64, None),
                                      (np.uint32, np.complex128, None),
                                      (np.float64, np.int32, np.complex64),
                                      (np.float64, np.float64, np.complex64)],
                         ids=["c128", "c64", "u32xc128", "f64xs32->c64", "f64xf64->c64"])
def test_complex_dot_infinite_products(form: str, lt: Any, rt: Any, pt: Any) -> None:
    sa, sb, dn = DOT_FORMS[form]
    rng = np.random.default_rng(5)

    def make(shape: tuple[int, ...], dt: Any, special: Any) -> np.ndarray:
        if np.dtype(dt).kind == "c":
            x = _parts(rng.integers(-4, 5, shape), rng.integers(-4, 5, shape) / 2, dt)
        else:
            x = rng.integers(0 if np.dtype(dt).kind == "u" else -4, 5, shape).astype(dt)
        x[..., 0, 0] = special
        return x

    big = _parts(-np.inf, -2.0, np.complex128) if np.dtype(rt).kind == "c" else 1e39
    a = make(sa, lt, 3 if np.dtype(lt).kind in "iu" else _parts(2, -0.5, lt)
             if np.dtype(lt).kind == "c" else 1e39)
    b = make(sb, rt, big if np.dtype(rt).kind != "i" else 7)

    def f(x: Any, y: Any) -> Any:
        return lax.dot_general(x, y, dn, preferred_element_type=pt)

    check(f, a, b, rtol=1e-5)


# ----- 20k run: reduce-precision to no mantissa bits keeps NaN --------------------------------


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64],
                         ids=["f16", "bf16", "f32", "f64"])
@pytest.mark.parametrize("ebits", [2, 6, 8])
def test_reduce_precision_no_mantissa_keeps_nan(dt: Any, ebits: int) -> None:
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 3.0, -1e30, 1e-3, 0.0, 5.0, 1.4], dt)
    check(lambda v: lax.reduce_precision(v, ebits, 0), x, exact=True)


# ----- 20k run (seeds 2811, 2812): base-dilated convolutions on cpu -------------------------
# conv_phases.py reads one output feature's kernel in place at a tap stride of B; the GEMM's
# BLAS call took such a one-column W as transposed with leading dimension k (stride 1), so
# it read the wrong taps (fuzz_min_20k/seed2812/015.hlo and 11 more).

BASE_DILATED = [  # (input width, kernel width, padding, feature groups, dtype)
    (1, 3, (2, 0), 1, np.float64), (2, 3, (0, 0), 1, np.float32),
    (2, 2, (1, 1), 1, np.float32), (6, 3, (-1, 1), 1, np.float32),
    (6, 3, (0, 2), 2, np.float64), (2, 3, (0, 0), 2, np.float32),
]


@pytest.mark.parametrize("case", BASE_DILATED, ids=[str(c[:4]) for c in BASE_DILATED])
def test_conv_base_dilated_one_output_feature(case: tuple[Any, ...]) -> None:
    width, kw, pad, groups, dt = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2 * groups, width)).astype(dt)
    k = rng.standard_normal((groups, 2, kw)).astype(dt)

    def f(a: Any, b: Any) -> Any:
        return lax.conv_general_dilated(a, b, (1,), [pad], (2,), (1,),
                                        feature_group_count=groups)

    check(f, x, k, rtol=1e-4 if dt == np.float32 else 1e-10)


# ----- 20k run: which f16/f32 convolutions XLA runs in Eigen (multiplying padding) ----------
# Base dilation skips holes only at stride 1 without window dilation or feature groups (a
# transposed convolution); buffers of at most 8 bytes (at 4 bytes an element) are
# under-aligned for Eigen and run the elemental convolution, which skips padding.

EIGEN_CASES = [  # (x shape, k shape, stride, padding, lhs dil, rhs dil, groups, NaN at)
    ((2, 4, 1), (2, 2, 3), 2, (3, 3), 2, 1, 2, (0, 0, 0)),   # seed2811/033: multiplies
    ((2, 4, 6), (2, 2, 1), 2, (1, 2), 2, 2, 2, (0, 0, 0)),   # seed2811/039: multiplies
    ((1, 2, 3), (1, 2, 3), 2, (6, 6), 2, 2, 1, (0, 1, 0)),   # seed2812/003: multiplies
    ((2, 2, 5), (1, 2, 3), 2, (1, 0), 1, 2, 1, (0, 1, 0)),   # seed2811/038: result 4 bytes
    ((1, 1, 5), (1, 1, 2), 1, (1, 0), 1, 1, 1, (0, 0, 0)),   # kernel 8 bytes: skips
    ((1, 1, 5), (1, 1, 3), 1, (1, 0), 1, 1, 1, (0, 0, 0)),   # all >= 12 bytes: multiplies
]


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("case", EIGEN_CASES, ids=[str(i) for i in range(len(EIGEN_CASES))])
def test_conv_eigen_or_elemental_padding(case: tuple[Any, ...], dt: Any) -> None:
    xs, ks, stride, pad, ld, rd, groups, at = case
    x = np.linspace(-1.0, 1.0, int(np.prod(xs))).reshape(xs).astype(dt)
    k = np.linspace(0.5, 1.5, int(np.prod(ks))).reshape(ks).astype(dt)
    k[at] = np.nan

    def f(a: Any, b: Any) -> Any:
        return lax.conv_general_dilated(a, b, (stride,), [pad], (ld,), (rd,),
                                        feature_group_count=groups)

    check(f, x, k, rtol=1e-2 if dt == np.float16 else 1e-5)


# ----- 20k run: convolutions XLA rewrites before it emits them (conv_plan.py) -----
# Depthwise feature groups of f64 (and jax's f64 parts of c128) are expanded into one
# convolution over every input feature with a zeroed kernel: another group's inf or NaN times
# 0 is NaN (seed2811/006). Batch groups are expanded over a dilated group dimension whose holes
# Eigen multiplies by every other group's kernel. Operands are swapped when the kernel has more
# taps than the input (the swapped convolution reverses its window: elemental, skipping
# padding). Convolutions outside the entry computation are not canonicalized: with NCHW labels
# they run elementally.


def test_conv_depthwise_c128_other_group_nan_minimized() -> None:
    """fuzz_min_20k/seed2811/006.hlo: c128, one tap, window dilation 2, 2 groups; a NaN input of
    feature 1 makes feature 0 NaN at the same position (5), not only feature 1."""
    x = (np.linspace(-2.0, 2.0, 24) + 1j * np.linspace(1.0, -1.0, 24)).reshape(2, 2, 6)
    x[0, 1, 5] = complex(2.3, np.nan)
    x[1, 0, 0] = complex(-np.inf, -7.0)
    k = np.array([4.79 + 2.04j, 0.71 - 0.41j]).reshape(2, 1, 1)

    def f(a: Any, b: Any) -> Any:
        return lax.conv_general_dilated(a, b, (1,), [(0, 2)], (1,), (2,), feature_group_count=2)

    check(f, x, k, rtol=1e-12)


DEPTHWISE = [  # (groups, input features per group, spatial, kernel, padding, lhs/rhs dilation)
    (2, 1, 6, 1, (0, 2), (1, 2)), (3, 1, 5, 3, (2, 1), (1, 1)), (2, 1, 4, 2, (1, 1), (2, 1)),
    (2, 2, 5, 2, (1, 1), (1, 1)),  # 2 features a group: a group dimension, holes skipped
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=[str(c) for c in DEPTHWISE])
def test_conv_depthwise_f64_other_group_nonfinite(case: tuple[Any, ...]) -> None:
    groups, cpg, width, kw, pad, (ld, rd) = case
    x = np.linspace(-1.0, 1.0, 2 * groups * cpg * width).reshape(2, groups * cpg, width)
    x[0, groups * cpg - 1, width // 2] = np.inf
    x[1, 0, width - 1] = np.nan
    k = np.linspace(0.5, 1.5, 2 * groups * cpg * kw).reshape(2 * groups, cpg, kw)

    def f(a: Any, b: Any) -> Any:
        return lax.conv_general_dilated(a, b, (1,), [pad], (ld,), (rd,),
                                        feature_group_count=groups)

    check(f, x, k, rtol=1e-12)


BATCH_GROUPS = [  # (groups, spatial dims, stride, padding); kernel of group 1 has a NaN
    (2, 2, 1, 1),   # 3-D after expansion: Eigen multiplies the holes: groups 0 NaN everywhere
    (3, 1, 1, 1),   # stride 2 over the group dimension: not a transposed convolution
    (2, 1, 2, 0),   # strided: the generic Eigen convolution
    (2, 1, 1, 1),   # stride 1 over 2 groups: Eigen's transposed convolution skips holes
]


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("case", BATCH_GROUPS, ids=[str(c) for c in BATCH_GROUPS])
def test_conv_batch_groups_other_group_kernel_nan(case: tuple[int, ...], dt: Any) -> None:
    groups, nsp, stride, pad = case
    x = np.linspace(-1.0, 1.0, 2 * groups * 2 * 4 ** nsp).reshape(
        (2 * groups, 2) + (4,) * nsp).astype(dt)
    k = np.linspace(0.5, 1.5, 2 * groups * 2 * 3 ** nsp).reshape(
        (2 * groups, 2) + (3,) * nsp).astype(dt)
    k[(2, 1) + (0,) * nsp] = np.nan  # group 1 (features 2, 3), output feature 2

    def f(a: Any, b: Any) -> Any:
        return lax.conv_general_dilated(a, b, (stride,) * nsp, [(pad, pad)] * nsp,
                                        batch_group_count=groups)

    check(f, x, k, rtol=1e-2 if dt == np.float16 else 1e-5)


@pytest.mark.parametrize("width", [2, 5], ids=["swapped", "kept"])
def test_conv_operand_swap_skips_padding(width: int) -> None:
    """A kernel of 4 taps over 2 input positions is swapped with the input (XLA's
    ConvOperandSwapper): the swapped convolution runs elementally and skips padding; over 5
    positions it stays in Eigen and multiplies the padding's zeros by the inf."""
    x = np.linspace(-1.0, 1.0, 2 * width).reshape(1, 2, width).astype(np.float32)
    k = np.linspace(0.5, 1.5, 16).reshape(2, 2, 4).astype(np.float32)
    k[0, 0, 0] = np.inf

    def f(a: Any, b: Any) -> Any:
        return lax.conv_general_dilated(a, b, (1,), [(3, 3)])

    check(f, x, k, rtol=1e-5)


@pytest.mark.parametrize("labels", ["NCH", "NHC"])
@pytest.mark.parametrize("where", ["loop", "cond"])
def test_conv_outside_entry_computation(labels: str, where: str) -> None:
    """ConvCanonicalization looks at the entry computation only: an NCHW-labelled convolution
    in a while body or a conditional branch runs elementally (skips padding), an NHWC one in
    Eigen (multiplies it). The loop carries 4 KiB so that XLA does not compile it as one small
    kernel (SmallWhileLoopHoistingPass, under 1024 bytes), and runs 40 times so that hlofuse
    does not unroll it."""
    x = np.linspace(-1.0, 1.0, 10).reshape(1, 2, 5).astype(np.float32)
    k = np.linspace(0.5, 1.5, 12).reshape(2, 2, 3).astype(np.float32)
    k[0, 1, 0] = np.inf
    dims = (labels, "OIH", labels) if labels == "NCH" else (labels, "HIO", labels)

    def conv(a: Any, b: Any) -> Any:
        if labels == "NHC":
            a, b = jnp.moveaxis(a, 1, 2), jnp.transpose(b, (2, 1, 0))
        out = lax.conv_general_dilated(a, b, (1,), [(2, 1)], dimension_numbers=dims)
        return out if labels == "NCH" else jnp.moveaxis(out, 2, 1)

    def f(a: Any, b: Any, p: Any) -> Any:
        if where == "cond":
            return lax.cond(p > 0, lambda: conv(a, b), lambda: conv(-a, b))
        state = (jnp.zeros((1, 2, 6), np.float32), jnp.zeros(1024, np.float32))
        a = a + (0 * p).astype(np.float32)  # (p used: jax keeps the argument)
        return lax.fori_loop(0, 40, lambda i, st: (conv(a + 0 * st[1][0], b), st[1] + 1),
                             state)[0]

    check(f, x, k, np.int32(1), rtol=1e-5)


# ----- 20k run: sub-byte integers -> f8e8m0fnu ------------------------------------------------
# The interpreter raised InterpreterError (ml_dtypes has no int4 -> e8m0 cast). jax.jit, measured
# on every value: 0 and negatives are NaN (e8m0 has neither), the rest round to a power of two,
# half up (3 -> 4, 6 -> 8, 12 -> 16).


@pytest.mark.parametrize("dt", [ml_dtypes.int2, ml_dtypes.int4, ml_dtypes.uint2, ml_dtypes.uint4],
                         ids=lambda d: np.dtype(d).name)
def test_sub_byte_int_to_e8m0(dt: Any) -> None:
    info = ml_dtypes.iinfo(dt)
    check(lambda x: x.astype(E8), np.arange(info.min, info.max + 1).astype(dt), exact=True)


# ----- 20k run: abs of f8e8m0fnu on the cpu backend -------------------------------------------
# The cpu rounded an e8m0 op's float result through double, which reads 2^-127 (an f32
# subnormal) as 0 under DAZ: abs(2^-127) was NaN. A float result now rounds by its f32 bits.

E8_ALL = np.arange(256, dtype=np.uint8).view(E8)


@pytest.mark.parametrize("name", ["abs", "floor", "sign", "round", "max", "select"])
def test_e8m0_ops_keep_smallest_value(name: str) -> None:
    import jax.numpy as jnp

    unary: dict[str, Callable[..., Any]] = {"abs": jnp.abs, "floor": jnp.floor,
                                            "sign": jnp.sign, "round": jnp.round}
    if name in unary:
        check(unary[name], E8_ALL, exact=True)
        return
    other = np.roll(np.arange(256, dtype=np.uint8), 1).view(E8)
    binary: dict[str, Callable[..., Any]] = {"max": jnp.maximum,
                                             "select": lambda a, b: jnp.where(a > b, a, b)}
    check(binary[name], E8_ALL, other, exact=True)


# ----- 20k run: cbrt of a subnormal (f32, bf16) -----------------------------------------------
# XLA's CPU cbrt under DAZ gives every nonzero subnormal f32 of either sign the constant
# -5.595173541877215e-16 (bf16: computed as f32 and rounded); f64 subnormals flush to +-0.


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16, np.float64],
                         ids=lambda d: np.dtype(d).name)
def test_cbrt_of_subnormal(dt: Any) -> None:
    import jax.numpy as jnp

    if dt is np.float64:
        x = np.array([5e-324, -1e-310, 2.2250738585072014e-308, 0.0, -0.0, 8.0, -27.0])
    else:
        rng = np.random.default_rng(7)
        bits = np.concatenate([[1, 2, 3, 0x400000, 0x7FFFFF],
                               rng.integers(1, 0x800000, 64)]).astype(np.uint32)
        tiny = bits.view(np.float32)
        x = np.concatenate([tiny, -tiny, np.float32([0.0, -0.0, 2.0 ** -126, -2.0 ** -126,
                                                     1e-30, 8.0, -27.0, np.inf, np.nan])])
        x = x.astype(dt)
    check(jnp.cbrt, x, rtol=2e-7 if dt is np.float32 else 1e-15 if dt is np.float64 else 0)


CUMSUM_CASES = [  # (shape, axes applied in turn, reverse)
    ((2, 2, 4), (1,), False),
    ((2, 2, 4), (1, 2), False),
    ((2, 3, 5), (2, 1), True),
    ((3, 7), (0,), True),
    ((17,), (0,), False),
    ((4, 9, 3), (1,), False),
]


@pytest.mark.parametrize("dt", [np.uint8, np.int16, np.uint32, np.int32, np.int64, np.uint64])
@pytest.mark.parametrize("case", CUMSUM_CASES, ids=str)
def test_integer_cumsum(case: tuple[Any, ...], dt: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fuzz 20k class `reduce-cumsum[uint32]` (seed 2812, 010): the cpu doubled x[1] of a
    cumsum's padded reduce-window, as GCC 12's vectorizer miscompiled the window's guarded
    load into a masked load of the unshifted address (`cpu/units.KERNEL_WORKAROUNDS`). Compiled
    with the kernels' default flags (the tests' -O1 does not vectorize it)."""
    monkeypatch.delenv("HLOFUSE_CC_OPT", raising=False)
    shape, axes, reverse = case
    x = np.random.default_rng(7).integers(0, np.iinfo(dt).max, size=shape, dtype=dt,
                                          endpoint=True)

    def f(a: Any) -> Any:
        for ax in axes:
            a = lax.cumsum(a, axis=ax, reverse=reverse)
        return a

    check(f, x, exact=True)


# ----- 20k run: f32 log of a subnormal --------------------------------------------------------
# jax.jit's f32 log of a subnormal depends on the array's size, not the value: -inf (the
# flushed operand's log, as hlofuse gives) for 1, 2, 4, 8-10, 12 and 16 or more elements and
# any 2-D array measured; log(2^-150) = -103.97 (NaN for a negative subnormal: glibc's logf
# under DAZ) for 3, 5-7 elements and the last 3, 5-7 of 11, 13-15 (the fuzzer's f32[5]). Not
# emulated: the tests hold hlofuse to jax.jit where jax.jit is deterministic.


def _f32_subnormals(n: int, seed: int = 7) -> np.ndarray:
    bits = np.concatenate([[1, 2, 3, 0x400000, 0x7FFFFF],
                           np.random.default_rng(seed).integers(1, 0x800000, n)])
    tiny = bits.astype(np.uint32).view(np.float32)
    return np.concatenate([tiny, -tiny])


@pytest.mark.parametrize("shape", [(64,), (8, 9)], ids=str)
@pytest.mark.parametrize("name", ["log", "log1p"])
def test_log_of_subnormal(name: str, shape: tuple[int, ...]) -> None:
    import jax.numpy as jnp

    fn = {"log": jnp.log, "log1p": jnp.log1p}[name]
    x = np.resize(_f32_subnormals(40), shape)
    check(fn, x, rtol=0)
    check(fn, x.astype(ml_dtypes.bfloat16), rtol=0)
    check(fn, np.resize(np.array([5e-324, -1e-310, 2e-308, 0.0, -0.0]), shape), rtol=0)


def test_log_of_subnormal_flushes_on_both_backends() -> None:
    """The fuzzer's case (f32[5], where jax.jit gives -103.97): hlofuse's -inf, as jax.jit on
    every longer array."""
    import jax.numpy as jnp

    x = np.array([1e-45, 1e-40, 1.1e-38, -1e-40, 2.0], np.float32)
    for backend in BACKENDS:
        got = run_on(backend, jnp.log, (x,), pipeline="hlofuse")[0]
        np.testing.assert_array_equal(got[:4], [-np.inf] * 4, err_msg=backend)


# ----- sin, tan, tanh, expm1 of a subnormal ---------------------------------------------------
# XLA's CPU returns a subnormal operand of sin, tan, expm1 (f32, bf16, f64) and tanh (f32,
# bf16) unflushed; f64 tanh flushes it (`subnormals.PASSTHROUGH`). Long arrays take the cpu
# backend's vector sin and tanh.


@pytest.mark.parametrize("n", [5, 1030])
@pytest.mark.parametrize("name", ["sin", "tan", "tanh", "expm1"])
@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16, np.float64],
                         ids=lambda d: np.dtype(d).name)
def test_subnormal_operand_returned(dt: Any, name: str, n: int) -> None:
    fn = {"sin": lax.sin, "tan": lax.tan, "tanh": lax.tanh, "expm1": lax.expm1}[name]
    if dt is np.float64:
        bits = np.random.default_rng(5).integers(1, 1 << 52, 64, dtype=np.int64)
        tiny = np.concatenate([[5e-324, 2.225e-308], bits.astype(np.uint64).view(np.float64)])
    else:
        tiny = _f32_subnormals(64).astype(dt)
        tiny = tiny[tiny.astype(np.float32) != 0]
    x = np.resize(np.concatenate([tiny, -tiny, np.array([0.0, -0.0, 1e-30], dt)]), n).astype(dt)
    check(fn, x, rtol=0)


# ----- 20k run: f8e8m0fnu arithmetic on 2^-127 ------------------------------------------------
# XLA computes an e8m0 op as the f32 op on the bits (2^-127 is an f32 subnormal, read as 0
# under DAZ: 2^-127 * x and sqrt(2^-127) are NaN) and converts back by the bits; ceil and sign
# read 2^-127 unflushed; with the other operands constants, LLVM folds the op on 2^-127 exactly
# (2^-127 * 2 = 2^-126), and x / c is x * (1 / c) (interpreter/flush.py `Via`, cpu
# `cexpr_e8m0`). Every pair of encodings, every encoding for the fuzzer's FP8 unary ops.

E8_PAIRS = (np.repeat(np.arange(256, dtype=np.uint8), 256).view(E8),
            np.tile(np.arange(256, dtype=np.uint8), 256).view(E8))


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "rem", "max", "min", "pow",
                                  "atan2", "clamp"])
def test_e8m0_arithmetic_every_pair(name: str) -> None:
    if name == "clamp":
        check(lambda x, hi: lax.clamp(E8(2.0 ** -127), x, hi), *E8_PAIRS, exact=True)
        return
    fn = {"add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
          "max": lax.max, "min": lax.min, "pow": lax.pow, "atan2": lax.atan2}[name]
    check(fn, *E8_PAIRS, exact=True)


E8_UNARY = ["neg", "abs", "sign", "floor", "ceil", "round", "is_finite", "sqrt", "rsqrt",
            "cbrt", "exp", "expm1", "exp2", "log", "log1p", "sin", "cos", "tan", "tanh",
            "logistic", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh",
            "erf", "erf_inv", "square"]


@pytest.mark.parametrize("name", E8_UNARY)
def test_e8m0_unary_every_encoding(name: str) -> None:
    fn = {"round": lax.round, "is_finite": lax.is_finite, "erf_inv": lax.erf_inv,
          "square": lax.square}.get(name) or getattr(lax, name)
    check(fn, E8_ALL, exact=True)


E8_CONSTANT_OPS: list[tuple[str, Callable[..., Any]]] = [
    ("x*2", lambda x: x * E8(2.0)), ("x*0.5", lambda x: x * E8(0.5)),
    ("x/2", lambda x: x / E8(2.0)), ("x/2^-126", lambda x: x / E8(2.0 ** -126)),
    ("x/2^-127", lambda x: x / E8(2.0 ** -127)), ("x/2^127", lambda x: x / E8(2.0 ** 127)),
    ("2^-127/x", lambda x: E8(2.0 ** -127) / x), ("x+2^-127", lambda x: x + E8(2.0 ** -127)),
    ("2^-126-x", lambda x: E8(2.0 ** -126) - x), ("min(x,4)", lambda x: lax.min(x, E8(4.0))),
    ("max(x,2^-127)", lambda x: lax.max(x, E8(2.0 ** -127))),
    ("pow(x,0.5)", lambda x: lax.pow(x, E8(0.5))), ("atan2(x,1)", lambda x: lax.atan2(x, E8(1))),
    ("clamp", lambda x: lax.clamp(E8(2.0 ** -127), x, E8(2.0 ** -126))),
    ("sin(x)*2", lambda x: lax.sin(x) * E8(2.0)), ("ceil(sin(x))", lambda x: lax.ceil(lax.sin(x))),
]


@pytest.mark.parametrize("name,f", E8_CONSTANT_OPS, ids=[c[0] for c in E8_CONSTANT_OPS])
def test_e8m0_ops_with_constants(name: str, f: Callable[..., Any]) -> None:
    check(f, E8_ALL, exact=True)


def test_e8m0_smallest_value_literal() -> None:
    """XLA prints 2^-127 as 5.9e-39, which ml_dtypes' cast makes 2^-126: the parser takes the
    nearer of the two."""
    from hlofuse.text import parse

    text = ("HloModule m\nENTRY e {\n  ROOT c = f8e8m0fnu[4] constant({5.9e-39, 1.2e-38, "
            "8e-39, 9e-39})\n}\n")
    literal = parse(text).entry.root.literal
    np.testing.assert_array_equal(np.asarray(literal).view(np.uint8), [0, 1, 0, 1])


# loop-small-float: a whole-loop kernel keeps a uniform (per-loop) leaf in a local of its compute
# type (float for f16, bf16, the fp8s, f4, e8m0) and copied those bytes to the output as if they
# were the storage type's, so the narrow value came back as garbage (0 for f16)
NARROW = [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
          ml_dtypes.float8_e4m3fnuz, ml_dtypes.float4_e2m1fn, E8]


@pytest.mark.parametrize("dt", NARROW, ids=lambda d: np.dtype(d).name)
def test_whole_loop_carries_a_narrow_float_next_to_an_array(dt: Any) -> None:
    def f(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
        return lax.fori_loop(0, 3, lambda i, c: (-c[0], c[1] * jnp.asarray(2, dt)), (a, b))

    a = np.linspace(-1, 1, 5, dtype=np.float32)
    check(f, a, np.asarray(0.5, dt), exact=True)


@pytest.mark.parametrize("n", [4, 64])
def test_bf16_compare_with_constant_zero_reads_bits(n: int) -> None:
    """20k run class convert[bfloat16->bool]: jax lowers it to compare(x, constant 0) NE, which
    XLA's CPU evaluates as a bit test (a bf16 subnormal is True), while x > 0 and a compare with
    a zero array read the subnormal flushed (False). Scalar and vectorized kernels."""
    x = np.resize(np.array([1e-40, -1e-40, 0, -0.0, 1, np.nan], np.float32), n).astype(
        ml_dtypes.bfloat16)
    check(lambda v: v.astype(bool), x, exact=True)
    check(lambda v: (v != 0, v == 0, v > 0), x, exact=True)
    check(lambda v: v != v * 0, x, exact=True)


@pytest.mark.parametrize("k", [2, 64])
def test_integral_operands_of_a_float_dot_are_rounded_to_its_type_first(k: int) -> None:
    """20k run (seeds 3001/3002) class dot-batch[uint16xuint16->float16]: XLA converts the
    integral operands of a dot with a float result to that type before multiplying (u16 65535 is
    f16 inf, so 65535 * 0 is NaN; 2049 is 2048; i32 16777217 is f32 16777216). Small dots (the
    strength-reduced multiply and reduce) and large ones (the GEMM)."""
    def dot(t: Any) -> Callable[[Any, Any], Any]:
        return lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())),
                                            preferred_element_type=t)

    rng = np.random.default_rng(0)
    a = rng.choice(np.array([65535, 2049, 0, 1, 3], np.uint16), (3, k))
    b = rng.choice(np.array([0, 1, 3, 2049], np.uint16), (k, 4))
    check(dot(np.float16), a, b, rtol=2e-3)
    check(dot(np.float16), a.astype(np.int16) % 4096, b.astype(np.int16), rtol=2e-3)
    c = rng.choice(np.array([16777217, 1, -3], np.int32), (3, k))
    check(dot(np.float32), c, np.ones((k, 2), np.int32), rtol=1e-7 if k == 2 else 1e-6)


def test_e8m0_scatter_min_combines_under_daz() -> None:
    """20k run (seed 3002) class scatter-min[float8_e8m0fnu,...], interpreter: XLA combines an
    e8m0 scatter as its f32 op under DAZ (min(2^-127, y) is NaN: 0 has no e8m0 encoding); the
    interpreter took numpy's min in e8m0. An untouched 2^-127 stays as it is."""
    e8 = ml_dtypes.float8_e8m0fnu
    x = np.array([[2.0**-127, 0.0625, 1.0, 2.0**-127], [0.125, 4.0, 2.0, 8.0]],
                 np.float32).astype(e8)
    upd = np.array([[0.125, 2.0], [0.125, 0.5]], np.float32).astype(e8)
    idx = np.array([0, 2], np.int32)
    check(lambda a, u, i: a.at[:, i].min(u), x, upd, idx, exact=True)
    check(lambda a, u, i: a.at[:, i].max(u), x, upd, idx, exact=True)


@pytest.mark.parametrize("name", ["float8_e5m2fnuz", "float8_e4m3fn", "float8_e5m2",
                                  "float8_e3m4", "float8_e8m0fnu"])
def test_reduce_precision_e4m11_of_an_8_bit_float_as_xla(name: str) -> None:
    """20k run (seed 3102) class reduce_precision[float8_e5m2fnuz,e4m11]: XLA's CPU leaves an
    8-bit float (not e8m0) unchanged under exponent_bits=4, mantissa_bits=11 (57344 stays,
    where 4 exponent bits overflow), while e4m10, e4m12 and e3m11 reduce as defined. Every
    encoding (backends/xla_facts.py)."""
    x = np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, name))
    for e, m in ((4, 11), (4, 10), (4, 12), (3, 11)):
        check(lambda v, e=e, m=m: lax.reduce_precision(v, exponent_bits=e, mantissa_bits=m), x,
              exact=True)


# ----- 20k run (seeds 3301, 3302): complex division and products in the component type -------
# XLA's CPU divides complex numbers by Smith's method in the component type (f32 for c64, so
# a step past 2^128 is inf), its steps contracted to fused multiply-adds, under DAZ/FTZ (3302:
# (-4.3e37+5.7e7j) / (1.4e-28-1.9e-6j) has an infinite imaginary part in jax.jit, finite in f64).

def _extreme(rng: np.random.Generator, n: int, ft: Any, lim: float) -> np.ndarray:
    v = (rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-lim, lim, n)).astype(ft)
    pick = rng.random(n)
    return np.where(pick < 0.02, 0, np.where(pick < 0.04, np.inf, np.where(
        pick < 0.05, np.nan, v))).astype(ft)


@pytest.mark.parametrize("ct,ft,lim", [(np.complex64, np.float32, 38.5),
                                       (np.complex128, np.float64, 308.0)],
                         ids=["c64", "c128"])
def test_complex_divide_is_xla_smith_in_the_component_type(ct: Any, ft: Any,
                                                           lim: float) -> None:
    rng = np.random.default_rng(3302)
    n = 4000
    a, b = (_parts(_extreme(rng, n, ft, lim), _extreme(rng, n, ft, lim), ct) for _ in range(2))
    a[:2] = _parts(np.array([-4.261286e+37, 2.0]), np.array([5.6758252e+07, 1.0]), ct)
    b[:2] = _parts(np.array([1.3627239e-28, 0.0]), np.array([-1.8758261e-06, 0.0]), ct)
    check(lambda x, y: x / y, a, b, exact=True)


# A c64 matrix product whose f32 products overflow (3301: -3.4e38 * -15.3 is inf in f32, not
# in f64): Eigen's gemm sums ar*br and ai*bi apart in f32, so inf - inf, then the 1 + 0i
# scaling, gives nan+nanj where summing in f64 gave inf-infj.

def test_complex_matrix_dot_sums_in_the_component_type() -> None:
    a = _parts(np.array([[-3.4028235e+38, -1.5216645], [1.5260417, -0.23631634]]),
               np.array([[5.8859766e-02, -11.424629], [0.69523495, -0.39616197]]), np.complex64)
    a = np.concatenate([a, a[::-1]])
    b = _parts(np.array([[1.1754944e-38, -15.296859, 8.6771927], [-0.9659183, -0.9792158,
                                                                    0.81408006]]),
               np.array([[-0.33089605, 3.4294353, 1.8221718], [7.6402621, -0.5260039,
                                                               5.9606237e-03]]), np.complex64)
    f = lambda x, y: lax.dot_general(x, y, (((1,), (0,)), ((), ())))  # noqa: E731
    want = np.asarray(jax.jit(f)(a, b))
    assert np.isnan(want[0, 1].real) and np.isnan(want[0, 2].imag)  # (jax.jit's pattern)
    check(f, a, b, rtol=1e-5)


# A one-term complex dot (K = 1) is XLA's complex multiply, not Eigen's gemm: no 1 + 0i
# scaling, so (5.43-9.40j) * (9.73+3.4e38j), inf+infj in f32, keeps a real part of inf
# (seed 3401; an [M, 1] x [1, N] batch of 3, into f64).

def test_one_term_complex_dot_is_a_multiply() -> None:
    a = _parts(np.array([[[4.2297215], [4.9747243]], [[5.43232], [-0.11310826]]]),
               np.array([[[0.06401335], [0.77980316]], [[-9.39625], [-0.5997974]]]), np.complex64)
    b = _parts(np.array([[[-8.766132, 1.6805917, -2.4944577]], [[0.5, 9.729892, -3.208878]]]),
               np.array([[[5.2655611, -0.18903843, 0.01905312]], [[1.0, 3.4028235e+38,
                                                                   5.4127212]]]), np.complex64)
    dn = (((2,), (1,)), ((0,), (0,)))
    for pt in (None, np.float64):
        f = lambda x, y, pt=pt: lax.dot_general(x, y, dn, preferred_element_type=pt)  # noqa: E731
        want = np.asarray(jax.jit(f)(a, b))
        assert np.isinf(want[1, 0, 1].real)  # (jax.jit's: unscaled)
        if pt is None:
            check(f, a, b, rtol=1e-5)
        else:  # a complex dot into a real type: the interpreter only (cpu refuses it)
            got = run_on("interpreter", f, (a, b), pipeline="hlofuse")[0]
            np.testing.assert_allclose(got, want, rtol=1e-6)


# ----- the eighth 20k run (seeds 3501, 3502) -------------------------------------------------
# tanh of a complex number with a zero real part and an infinite or NaN imaginary part is
# NaN + NaN i in XLA (C99 and numpy: +-0 + NaN i); seed 3501 had 1e-45 - inf i, flushed.

def test_complex_tanh_of_zero_real_part_and_infinite_imaginary_part() -> None:
    for dt in (np.complex64, np.complex128):
        x = np.zeros(8, dt)
        x.real = [1.4e-45, 0.0, -0.0, 0.0, 1.0, 0.5, np.inf, 0.0]
        x.imag = [-np.inf, np.inf, np.nan, 3.0, np.inf, 0.25, np.nan, -np.inf]
        want = np.asarray(jax.jit(jnp.tanh)(x))
        assert np.isnan(want[1].real)  # (jax.jit's, not C99's 0 + NaN i)
        check(jnp.tanh, x, rtol=1e-5)


# A complex sum is XLA's scalar loop: in order, init first, in the type. With -max and +max in
# the imaginary parts, numpy's pairwise sum cancels them with other terms absorbed (seed 3501:
# 48.8j for jax.jit's -35.4j).

def test_complex_sum_in_order_cancels_as_xla() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(40) + 1j * rng.standard_normal(40)
    big = np.finfo(np.float64).max
    x[10], x[12] = 1 - big * 1j, 1 + big * 1j
    assert abs(np.sum(x).imag - np.asarray(jax.jit(jnp.sum)(x)).imag) > 1  # pairwise differs
    check(jnp.sum, x, rtol=1e-12)
    check(jnp.sum, x.reshape(5, 8).astype(np.complex64), rtol=1e-5)


# A complex scatter-add rounds to the type after every update, as XLA's CPU (seed 3501: c128
# then rounding once differed in the last bit of a c64 part): 1 + 16 x 4e-8 stays 1 in f32.

def test_complex_scatter_add_rounds_every_update() -> None:
    y = np.ones(2, np.complex64)
    u = np.full(16, 4e-8 + 4e-8j, np.complex64)
    f = lambda a, b: a.at[np.zeros(16, np.int32)].add(b)  # noqa: E731
    assert np.asarray(jax.jit(f)(y, u))[0].real == 1.0
    check(f, y, u, exact=True)
    g = lambda a, b: a.at[np.zeros(16, np.int32)].multiply(b)  # noqa: E731
    check(g, y * (1 + 1j), np.full(16, 1.01 - 0.02j, np.complex64), rtol=1e-6)


# A variadic e8m0 reduce of independent outputs is one reduce per output: the sum from 2^-127
# folds its init last (2^-127 + 2^-127 first would be 0 under DAZ, NaN in e8m0) while the
# product beside it starts from 1 (seed 3501).

def test_variadic_e8m0_reduce_decides_init_last_per_output() -> None:
    bits = [[127, 126, 124, 255, 127, 255, 255, 254], [255, 255, 0, 125, 122, 2, 123, 255],
            [255, 255, 255, 121, 120, 130, 255, 125]]
    a, b, c = (np.array(v, np.uint8).view(E8).reshape(1, 2, 4) for v in bits)
    tiny, one = E8(2.0 ** -127), E8(1.0)

    def f(a: Any, b: Any, c: Any) -> Any:
        return lax.reduce((a, b, c), (tiny, tiny, one),
                          lambda x, y: (jnp.maximum(x[0], y[0]), x[1] + y[1], x[2] * y[2]),
                          (1,))

    assert float(np.asarray(jax.jit(f)(a, b, c)[1])[0, 2]) == 0.0625
    check(f, a, b, c, exact=True)


# tan(z) = -i tanh(iz) in XLA: an infinite or NaN real part with a zero imaginary part gives
# NaN + NaN i (C99 and numpy: NaN +- 0 i); seed 3601.

def test_complex_tan_of_infinite_real_part_and_zero_imaginary_part() -> None:
    for dt in (np.complex64, np.complex128):
        x = np.zeros(6, dt)
        x.real = [np.inf, -np.inf, np.nan, 1.0, np.inf, 0.3]
        x.imag = [0.0, -0.0, 0.0, np.inf, 1.0, 0.2]
        want = np.asarray(jax.jit(jnp.tan)(x))
        assert np.isnan(want[0].imag)  # (jax.jit's, not C99's NaN + 0 i)
        check(jnp.tan, x, rtol=1e-5)


# An fp8 dot into an integer type is normalized by XLA through f16: f8 -> f16 -> f32 operands,
# the f32 sum -> f16 -> f8 -> integer. Rounding the sum to f16 first can make a tie: 7.499687
# is f16 7.5, then f8e5m2fnuz 8, where rounding straight to f8 gives 7 (seed 3702).

@pytest.mark.parametrize("name", ["float8_e5m2fnuz", "float8_e5m2", "float8_e4m3fn",
                                  "float8_e4m3fnuz"])
def test_fp8_dot_into_integer_rounds_through_f16(name: str) -> None:
    t = getattr(ml_dtypes, name)
    if "e5m2" in name:  # 5*1.5 - 3.05e-5*5 - 7*2.29e-5 = 7.499687
        a = np.array([[5.0, -3.0517578e-05, -7.0]], np.float32)
        b = np.array([[1.5], [5.0], [2.2888184e-05]], np.float32)
    else:  # 4 + 2.75 - 2^-9/16 = 6.749878: f16 6.75, a tie -> 7; straight to f8: 6.5
        a = np.array([[4.0, 2.75, 2.0 ** -9]], np.float32)
        b = np.array([[1.0], [1.0], [-0.0625]], np.float32)
    a, b = a.astype(t), b.astype(t)
    f = lambda x, y: lax.dot(x, y, preferred_element_type=jnp.int32)  # noqa: E731
    direct = int(np.float32(a.astype(np.float32) @ b.astype(np.float32)).astype(t)
                 .astype(np.float32)[0, 0])
    assert int(np.asarray(jax.jit(f)(a, b))[0, 0]) != direct  # (the case bites)
    check(f, a, b, exact=True)


# expm1 of a complex number with a zero imaginary part is XLA's expm1 of the real part, with a
# +0 imaginary part: expm1(inf + 0i) = inf + 0i (numpy and exp(x) * sin(y): NaN); seed 3801.

def test_complex_expm1_of_a_real_operand() -> None:
    for dt in (np.complex64, np.complex128):
        x = np.zeros(8, dt)
        x.real = [np.inf, -np.inf, np.nan, -0.0, -1.0, 0.5, 1.0, 0.0]
        x.imag = [0.0, 0.0, 0.0, 0.0, -0.0, 0.0, 0.25, np.inf]
        want = np.asarray(jax.jit(jnp.expm1)(x))
        assert want[0].imag == 0  # (jax.jit's: not NaN)
        check(jnp.expm1, x, rtol=1e-5)
