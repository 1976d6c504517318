"""Regression tests for the differential fuzzer's reduction classes of the 20,000-program run
(issue 29, benchmarks/results/fuzz_findings.md): each minimized case and variants, run by
jax.jit (the oracle), the interpreter and the cpu backend, all three compared (`check`)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from hlofuse.backends.window_order import peeled_offset, window_order
from hlofuse.ir.attributes import WindowDim
from jax_oracle import run_on, x64  # noqa: F401  (x64: an autouse fixture)
from test_fuzz_regressions import check

BF16 = ml_dtypes.bfloat16

# ----- reduce-window of a narrow float: XLA's loop order ------------------------------------
# XLA's loop nest peels the last offset of one padded window dimension into a second nest
# (backends/window_order.py); bf16 and the 8-bit floats round every step, so the order shows.


def test_reduce_window_bf16_order_minimized() -> None:
    """2812/000: output (0, 3, 1) folds x[0,2,1], x[1,2,1], x[0,2,2], x[1,2,2] (the last window
    dimension's second offset peeled off): 1.2890625, not row-major's 1.28125."""
    x = np.zeros((3, 3, 4), BF16)
    x[0, 2, 1:3] = [0.104004, 1.48438]
    x[1, 2, 1:3] = [-0.175781, -0.126953]

    def f(v: Any) -> Any:
        return lax.reduce_window(v, BF16(0), lax.add, (2, 1, 2), (1, 1, 2),
                                 [(0, 1), (1, 0), (1, 1)])

    check(f, x, exact=True)


WINDOWS = [  # (shape, window, strides, padding): peeled or not, as XLA's loop nest
    ((3, 3, 4), (2, 1, 2), (1, 1, 2), ((0, 1), (1, 0), (1, 1))),
    ((4, 4), (3, 2), (1, 1), ((1, 1), (1, 1))),
    ((4, 4), (2, 3), (1, 1), ((0, 0), (0, 1))),
    ((4, 4), (3, 3), (1, 1), ((0, 0), (0, 1))),
    ((4, 4), (3, 2), (1, 1), ((0, 0), (1, 0))),
    ((4, 3), (3, 2), (2, 1), ((1, 1), (0, 1))),
    ((5, 4), (2, 2), (2, 1), ((0, 1), (0, 1))),
    ((2, 3, 4), (2, 3, 3), (2, 1, 2), ((0, 1), (1, 1), (1, 0))),
]


@pytest.mark.parametrize("case", WINDOWS, ids=[str(c[1:]) for c in WINDOWS])
@pytest.mark.parametrize("dt,op", [(BF16, "add"), (BF16, "mul"),
                                   (ml_dtypes.float8_e4m3fn, "add"),
                                   (ml_dtypes.float8_e5m2, "mul")],
                         ids=["bf16-add", "bf16-mul", "e4m3fn-add", "e5m2-mul"])
def test_reduce_window_narrow_float_order(case: tuple[Any, ...], dt: Any, op: str) -> None:
    shape, size, strides, pads = case
    x = (np.random.default_rng(len(shape) * 7 + size[-1]).standard_normal(shape) *
         1.3).astype(dt)
    fn, init = (lax.add, 0) if op == "add" else (lax.mul, 1)

    def f(v: Any) -> Any:
        return lax.reduce_window(v, dt(init), fn, size, strides, list(pads))

    check(f, x, exact=True)


def test_window_order_peels_as_xla() -> None:
    """The positions of a 3x2 window with padding on both sides: XLA folds the second column
    after the first; a 3x3 window is not peeled (cutting one offset leaves it constrained)."""
    def dims(size: tuple[int, ...], pad: int) -> list[WindowDim]:
        return [WindowDim(size=s, pad_lo=pad, pad_hi=pad) for s in size]

    w = dims((3, 2), 1)
    assert peeled_offset((4, 4), w, (4, 5)) == (1, 1)
    order = list(window_order((4, 4), w, (4, 5), [range(3), range(2)]))
    assert order == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    assert peeled_offset((4, 4), dims((3, 3), 1), (4, 4)) is None
    assert peeled_offset((4, 4), dims((2, 2), 0), (3, 3)) is None  # no padding: row-major


# ----- reduce-prod of floats: partial products flushed (2811/041) -----------------------------

TINY = float(np.finfo(np.float64).tiny)


def test_f64_product_flushes_partial_products_minimized() -> None:
    """2811/041's values: a partial product falls subnormal, FTZ makes it 0, and 0 x inf is
    NaN (the interpreter multiplied in f64 without flushing: inf)."""
    x = np.array([1.5, -TINY, TINY, 0.7, np.inf, 1.8e308, -3.0, 2.0] * 6).reshape(3, 4, 4)
    check(lambda v: jnp.prod(v), x, exact=True)


PRODUCT_POOL = [0.5, 3.0, -2.0, 1e-200, 1e200, 1e-150, 1e150, -1e-100, 1e100, np.inf,
                -np.inf, 1e-300, 1e300, TINY, -0.0, np.nan]


@pytest.mark.parametrize("dt", [np.float64, np.float32, BF16], ids=["f64", "f32", "bf16"])
@pytest.mark.parametrize("axes", [(0,), (1,), (0, 1)], ids=["rows", "columns", "all"])
def test_float_product_in_type_flushed(dt: Any, axes: tuple[int, ...]) -> None:
    """Sequential products in the type (f32 overflows at 2^128), each step flushed."""
    rng = np.random.default_rng(sum(axes) + len(axes))
    pool = PRODUCT_POOL if dt is np.float64 else [  # f32's range
        0.5, 3.0, -2.0, 1e-20, 1e20, 1e-15, 1e15, -1e-10, 1e10, np.inf, -np.inf, 1e-30,
        1e30, float(np.finfo(np.float32).tiny), -0.0, np.nan]
    x = rng.choice(np.array(pool), (7, 9)).astype(dt)
    check(lambda v: jnp.prod(v, axis=axes), x, exact=True)


# ----- complex products: XLA's fused formula; one element per output (2811/032) ---------------


def test_complex_product_of_one_element_minimized() -> None:
    """2811/032: prod of c128[1] is the element (XLA makes the reduce a reshape), not
    (1+0j) * z = nan+infj."""
    check(lambda v: jnp.prod(v), np.array([complex(0.020467780267127443, np.inf)]), exact=True)


def test_reduce_of_one_element_per_output_is_the_element() -> None:
    """Neither the init nor the reducer is applied: -0.0 and a subnormal stay (unflushed)."""
    x = np.array([[1e-310], [-0.0], [np.nan], [2.5]])
    check(lambda v: jnp.sum(v, axis=1), x, exact=True)
    check(lambda v: lax.reduce(v, 2.0, lax.add, (1,)), x, exact=True)
    check(lambda v: jnp.max(v, axis=1), x, exact=True)
    z = np.array([[complex(0.5, np.inf)], [complex(np.inf, np.nan)], [complex(-0.0, 1e-310)]])
    check(lambda v: jnp.prod(v, axis=1), z, exact=True)


COMPLEX_POOL = [0.5, -2.0, np.inf, -np.inf, np.nan, 0.0, 1e300, 1.5, -0.0]


@pytest.mark.parametrize("dt", [np.complex128, np.complex64], ids=["c128", "c64"])
def test_complex_product_fused_formula(dt: Any) -> None:
    """(5e299+1.5e300j) * (1e300-infj) is inf-infj in XLA (im = fma(ai, br, ar*bi): the
    product 1.5e600 is exact inside the fma), so prod(..., -inf+1e300j) is nan+infj."""
    rng = np.random.default_rng(3)
    big = 1e300 if dt is np.complex128 else 1e30
    pool = [big if v == 1e300 else v for v in COMPLEX_POOL]
    x = np.array([complex(rng.choice(pool), rng.choice(pool)) for _ in range(5 * 4)],
                 dt).reshape(5, 4)
    check(lambda v: jnp.prod(v, axis=1), x, exact=True)
    chain = np.array([[0.5 + 1.5j, big + 0j, complex(big, -np.inf), complex(-np.inf, big)]], dt)
    check(lambda v: jnp.prod(v, axis=1), chain, exact=True)


@pytest.mark.parametrize("dt", [np.complex128, np.complex64], ids=["c128", "c64"])
def test_complex_window_product_skips_padding(dt: Any) -> None:
    """1 + 0j is no identity of XLA's complex multiply ((inf-infj) * (1+0j) is NaN): a
    reduce-window product skips its padding instead of folding the init there."""
    big = 1e200 if dt is np.complex128 else 1e30
    x = np.array([complex(np.inf, 1e-20), complex(0.5, -big), 3 + 0.5j, 3 + 0.5j, 3 - 2j,
                  complex(np.inf, big)], dt)  # the last window: (inf+...j), then padding

    def f(v: Any) -> Any:
        return lax.reduce_window(v, dt(1), lax.mul, (3,), (1,), [(0, 2)])

    check(f, x, rtol=1e-14 if dt is np.complex128 else 1e-6)
    rng = np.random.default_rng(2)
    pool = np.array([0.5, 3.0, -2.0, 1e-30, 1e30, np.inf, 1e-20])
    y = (rng.choice(pool, (4, 5)) + 1j * rng.choice(pool, (4, 5))).astype(dt)
    check(lambda v: lax.reduce_window(v, dt(1), lax.mul, (2, 3), (1, 2), [(0, 1), (1, 1)]), y,
          rtol=1e-14 if dt is np.complex128 else 1e-6)


@pytest.mark.parametrize("dt", [np.complex128, np.complex64], ids=["c128", "c64"])
def test_complex_multiply_fused_formula(dt: Any) -> None:
    rng = np.random.default_rng(5)
    big = 1e300 if dt is np.complex128 else 1e30
    pool = [big if v == 1e300 else v for v in COMPLEX_POOL] + [3.0000000000000004, 0.1]
    a, b = (np.array([complex(rng.choice(pool), rng.choice(pool)) for _ in range(400)], dt)
            for _ in range(2))
    check(lax.mul, a, b, rtol=1e-15 if dt is np.complex128 else 1e-7)


# ----- f64 log-plus-one: XLA's own approximation (2811/015, atanh) ----------------------------


def test_log1p_f64_is_xla_approximation() -> None:
    """XLA's f64 log1p is Cephes' rational form below sqrt(2) - 1, up to 128 ulps from the true
    value near |x| = 0.414: exactly jax.jit's there (pure arithmetic, fused as XLA fuses it);
    log(1 + x) beyond, within the C library's rounding."""
    rng = np.random.default_rng(11)
    small = np.concatenate([rng.uniform(-0.414, 0.414, 3000), [-0.4141336072798776, 0.0, -0.0,
                                                               1e-300, 0.3970234676852453]])
    check(lax.log1p, small, exact=True)
    large = np.array([-1.0, -0.9, -0.5, 0.5, 1.0, 3.0, 1e300, np.inf, -2.0, np.nan])
    check(lax.log1p, large, rtol=1e-15)


def test_atanh_f64_minimized() -> None:
    """2811/015: atanh(0.3970234676852453) is 0.4201104399965225 (jax lowers atanh to
    0.5 * (log1p(x) - log1p(-x)); with the true log1p it was 41 ulps off). Inside one fusion
    XLA fuses log1p's last product differently (x^3 P/Q, not x^2 / 2, as the two log1p share
    it): up to 2 ulps remain, within the fuzzer's trans class."""
    x = np.array([0.3970234676852453, -0.24136075, 0.41, -0.0823, 0.9, -0.999, 0.5, 2.0])
    want = np.asarray(jax.jit(jnp.arctanh)(x))
    for backend in ("interpreter", "cpu"):
        got = run_on(backend, jnp.arctanh, (x,), pipeline="hlofuse")[0]
        finite = np.isfinite(want)
        assert np.array_equal(np.isnan(got), np.isnan(want)), backend
        ulps = np.abs(got[finite].view(np.int64) - want[finite].view(np.int64))
        assert ulps.max() <= 2, (backend, ulps)
    assert run_on("interpreter", jnp.arctanh, (x[:1],))[0][0] == 0.4201104399965225


# ----- 8-bit floats without infinities: no -inf identity; the fnuz NaN orders lowest ---------

FP8_NO_INF = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz"]


@pytest.mark.parametrize("name", FP8_NO_INF)
def test_padded_max_min_windows_of_fp8_without_infinities(name: str) -> None:
    """Seed 77 class fp8-window-pad: jax sends the type's lowest finite value as the init; the
    cpu lowering folded its own -inf identity at padding, which these types turn into NaN."""
    x = np.array([1, -2, 3, 0.5, -1, 0, 2, 1.5], np.float32).astype(getattr(ml_dtypes, name))
    check(lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (3,), (1,), [(1, 1)]), x,
          exact=True)
    check(lambda v: lax.reduce_window(v, jnp.inf, lax.min, (3,), (1,), [(2, 1)]), x,
          exact=True)
    check(lambda v: lax.cummax(v), x, exact=True)


@pytest.mark.parametrize("name", ["float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz"])
def test_fnuz_nan_orders_below_every_value(name: str) -> None:
    """Seed 77 class fnuz-nan-order: the fnuz NaN has -0's encoding (0x80) and XLA's total order
    puts it below -max (jnp.sort first, top_k last); sign-magnitude keys put it just below +0."""
    x = np.array([1, -2, 3, 0.5, np.nan, -1, 0, 2], np.float32).astype(getattr(ml_dtypes, name))
    check(lambda v: lax.top_k(v, 8)[0], x, exact=True)
    check(lambda v: lax.top_k(-v, 3)[1], x, exact=True)
    check(lambda v: lax.sort(v), x, exact=True)


@pytest.mark.parametrize("out", [jnp.int8, jnp.int32, jnp.uint16, jnp.uint64])
@pytest.mark.parametrize("ft", [jnp.float16, jnp.bfloat16, jnp.float8_e5m2, jnp.float8_e4m3fn])
def test_small_float_dot_with_an_integral_result_rounds_the_sum_first(out: Any, ft: Any) -> None:
    """Fuzz class small-float-dot-int-result: an f16/bf16/fp8 dot with an integral result rounds
    its f32 sum to the operand type before converting (f16 -> s64: -22688 = f16(-22694.x);
    measured on 10 random dots per type pair, 0 misses, against 18-60 unrounded)."""
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((3, 8)) * 30).astype(ft)
    b = (rng.standard_normal((8, 2)) * 30).astype(ft)
    check(lambda x, y: lax.dot(x, y, preferred_element_type=out), a, b, exact=True)


def test_top_k_of_e8m0_orders_by_the_unsigned_encoding() -> None:
    """20k run (seeds 2901/2902) class topk[float8_e8m0fnu], cpu: the top-k key read the
    unsigned e8m0 encoding as a signed byte (2^1 .. 2^127 and NaN below 2^-127 .. 2^0)."""
    x = np.array([2.0**-100, 4.0, 2.0**100, 0.5, np.nan, 1.0], np.float32).astype(
        ml_dtypes.float8_e8m0fnu)
    check(lambda v: lax.top_k(v, 6)[1], x, exact=True)
    check(lambda v: lax.top_k(v, 3)[0], x, exact=True)


@pytest.mark.parametrize("name", ["int4", "int2", "uint4", "uint2"])
def test_sub_byte_popcnt_as_xla(name: str) -> None:
    """20k run (seeds 2901/2902) class popcnt[int4], both backends: XLA's CPU counts an s4's
    bits sign-extended to a byte (popcnt(-1) = 8, wrapped to s4: -8; -8 -> 5), while s2 and the
    unsigned types count within their width. Every value of each type."""
    dt = getattr(ml_dtypes, name)
    info = ml_dtypes.iinfo(dt)
    x = np.arange(int(info.min), int(info.max) + 1).astype(np.int8).astype(dt)
    check(lax.population_count, x, exact=True)


@pytest.mark.parametrize("name", ["int4", "int2", "uint4", "uint2"])
def test_sub_byte_mulhi_as_xla(name: str) -> None:
    """20k run (2901/2902) classes mulhi[int4], mulhi[uint4] (12 programs), both backends: XLA's
    CPU shifts a 4-bit product by 8 as if the type were a byte (s4: -1 for a negative product,
    else 0; u4: always 0), the 2-bit types by their width. Every value pair of each type."""
    dt = getattr(ml_dtypes, name)
    info = ml_dtypes.iinfo(dt)
    vals = np.arange(int(info.min), int(info.max) + 1)
    a, b = np.meshgrid(vals, vals)
    check(lax.mulhi, a.reshape(-1).astype(np.int8).astype(dt),
          b.reshape(-1).astype(np.int8).astype(dt), exact=True)


@pytest.mark.parametrize("name", ["int2", "uint2"])
def test_two_bit_sort_sorts(name: str) -> None:
    """20k run class sort[int2] (6 programs): XLA's CPU sort of a 2-bit integer is wrong (s2
    [1, 0, -1, -2] -> [-2, -2, -1, 1]) and corrupts the heap, so the fuzzer no longer draws it
    and numpy is the oracle here: both backends give the input sorted, along either axis."""
    dt = getattr(ml_dtypes, name)
    info = ml_dtypes.iinfo(dt)
    x = np.random.default_rng(0).integers(int(info.min), int(info.max) + 1, (5, 7))
    for axis in (0, 1):
        want = np.sort(x, axis=axis)
        for backend in ("interpreter", "cpu"):
            got = run_on(backend, lambda v, a=axis: lax.sort(v, dimension=a),
                         (x.astype(np.int8).astype(dt),), pipeline="hlofuse")
            np.testing.assert_array_equal(got[0].astype(np.int64), want, err_msg=backend)


E8 = ml_dtypes.float8_e8m0fnu


@pytest.mark.parametrize("op,init", [(lax.add, 2.0**-127), (lax.max, 2.0**-127),
                                     (lax.mul, 1.0), (lax.min, 2.0**127), (lax.add, 0.25)])
def test_e8m0_reduce_order_as_xla(op: Any, init: float) -> None:
    """20k run classes reduce-variadic[...e8m0...] and the e8m0 reduces: XLA reduces e8m0 in f32,
    each step rounded to e8m0, the init first, except that an init of the constant 2^-127 is
    folded last (LLVM folds the f32 subnormal constant away: 2^-127 + 2 is 2, not NaN); a
    flushed 2^-127 element still makes a product or a minimum NaN. Rows and columns."""
    x = np.array([[2.0**-127, 2.0, 4.0, 1.0], [2.0, 2.0**-127, 0.5, 2.0**-126],
                  [0.25, 0.25, 0.5, 0.25], [4.0, 1.0, 1.0, 1.0]], np.float32).astype(E8)
    for axis in (0, 1):
        check(lambda v, a=axis: lax.reduce(v, E8(init), op, (a,)), x, exact=True)


def test_variadic_reduce_products_in_order() -> None:
    """20k run classes reduce-variadic[mul:complex64,mul:complex64] and [min:uint16,
    mul:complex64,...]: the interpreter reduced a variadic reducer pairwise; XLA computes each
    independent output as a single reduce, a complex product in order, so where a part is
    infinite the NaN/inf pattern follows the order (pairwise gave nan+nanj here)."""
    z = np.array([[1.6100958e+02 + 6.9417191e+01j, -5.8552884e+11 - 7.5836975e+01j,
                   -1.3412197e+10 + 1.4209820e+15j],
                  [-1.4015203e+00 + 7.2609375e+04j, 5.0268283e+17 + 8.4373269e+15j,
                   9.8971305e+13 + 1.1648640e+11j],
                  [-1.6429459e+05 + 7.8758825e+16j, -1.0743649e+00 + 8.4407869e+10j,
                   8.7304211e+00 + 7.5593614e+13j],
                  [complex(np.inf, 1), -7.1306808e+01 - 1.3504510e+00j,
                   6.2101786e+09 - 7.6951462e+10j]], np.complex64)

    def g(a: Any, b: Any) -> Any:
        one = np.complex64(1)
        return lax.reduce((a, b), (one, one), lambda p, q: (lax.mul(p[0], q[0]),
                                                            lax.mul(p[1], q[1])), (0,))

    check(g, z, z, rtol=1e-6)
