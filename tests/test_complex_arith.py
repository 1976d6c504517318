"""Complex and mixed-type arithmetic as XLA defines it, checked against jax.jit on the
interpreter and the cpu backend: dots and convolutions whose operands have different element
types (complex with anything, mixed integer widths), complex scatter combiners, signed zeros in
max/min, complex edge values, and sub-byte / fp8 conversions (run, or refused with an hlofuse
error naming the instruction, never a bare Python exception)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from hlofuse.errors import HloError
from jax_oracle import BACKENDS, run_on, x64  # noqa: F401  (x64: an autouse fixture)


def check(f: Callable[..., Any], *args: np.ndarray, exact: bool = False,
          signs: bool = False) -> None:
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(f)(*args))]
    for backend in BACKENDS:
        got = run_on(backend, f, args)
        assert len(got) == len(want), backend
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype, backend
            if exact or w.dtype.kind in "iub":
                np.testing.assert_array_equal(g, w, err_msg=backend)
            else:
                wide = np.complex128 if w.dtype.kind == "c" else np.float64
                np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol=1e-5,
                                           atol=1e-5, err_msg=backend)
            if signs:
                parts = (lambda a: (a.real, a.imag)) if w.dtype.kind == "c" else (lambda a: (a,))
                for gp, wp in zip(parts(g), parts(w), strict=True):
                    np.testing.assert_array_equal(np.signbit(gp), np.signbit(wp), err_msg=backend)


RNG = np.random.default_rng(0)


def _arr(dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "c":
        return (RNG.integers(-4, 5, shape) + 1j * RNG.integers(-4, 5, shape)).astype(dt)
    if dt.kind == "u":
        return RNG.integers(0, 5, shape).astype(dt)
    return RNG.integers(-4, 5, shape).astype(dt)


PAIRS = [("complex64", "int8"), ("uint32", "complex64"), ("int16", "complex64"),
         ("bfloat16", "complex64"), ("complex64", "float32"), ("uint8", "complex64"),
         ("complex64", "complex64"), ("complex128", "complex128"), ("int8", "int16")]
SHAPES = [((5,), (5,)), ((3, 5), (5,)), ((3, 5), (5, 4))]


def _dt(name: str) -> Any:
    return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


@pytest.mark.parametrize("shapes", SHAPES, ids=["vv", "mv", "mm"])
@pytest.mark.parametrize("pair", PAIRS, ids=["x".join(p) for p in PAIRS])
def test_mixed_dot(pair: tuple[str, str], shapes: tuple[tuple[int, ...], ...]) -> None:
    a, b = _arr(_dt(pair[0]), shapes[0]), _arr(_dt(pair[1]), shapes[1])
    out = jnp.result_type(a.dtype, b.dtype)
    check(lambda x, y: lax.dot(x, y, preferred_element_type=out), a, b)


@pytest.mark.parametrize("pair", PAIRS[:3], ids=["x".join(p) for p in PAIRS[:3]])
def test_mixed_dot_general_batched(pair: tuple[str, str]) -> None:
    a, b = _arr(_dt(pair[0]), (2, 3, 4)), _arr(_dt(pair[1]), (2, 4, 5))
    out = jnp.result_type(a.dtype, b.dtype)
    dn = (((2,), (1,)), ((0,), (0,)))
    check(lambda x, y: lax.dot_general(x, y, dn, preferred_element_type=out), a, b)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_conv(dtype: str) -> None:
    x, k = _arr(dtype, (1, 2, 6, 6)), _arr(dtype, (3, 2, 3, 3))
    check(lambda a, w: lax.conv(a, w, (1, 1), "SAME"), x, k)


@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("mode", ["drop", "clip", "promise_in_bounds"])
def test_complex_scatter(op: str, mode: str) -> None:
    x = _arr(np.complex64, (5, 2))
    idx = np.array([1, 3, 1, 7], np.int32)
    upd = _arr(np.complex64, (4, 2))
    if op == "add":
        check(lambda a, j, u: a.at[j].add(u, mode=mode), x, idx, upd)
    else:
        check(lambda a, j, u: a.at[j].multiply(u, mode=mode), x, idx, upd)


def test_complex_scatter_folded() -> None:
    """Constant folding runs the interpreter: a constant complex scatter-add keeps its
    imaginary part in compiled code."""
    def f(a: jax.Array) -> jax.Array:
        base = jnp.array([1 + 2j, 3 - 1j, 0j], jnp.complex64)
        return base.at[jnp.array([0, 2, 0])].add(jnp.array([1j, 2 + 2j, -3j], jnp.complex64)) + a
    check(f, np.zeros(3, np.complex64))


def test_signed_zero_max_min() -> None:
    z = np.array([0.0, -0.0, 0.0, -0.0], np.float32)
    w = np.array([-0.0, 0.0, 0.0, -0.0], np.float32)
    check(lambda a, b: (lax.max(a, b), lax.min(a, b)), z, w, exact=True, signs=True)


def test_complex_div_by_signed_zero() -> None:
    a = np.array([1 + 1j, -2 + 0j, 1j, 0j], np.complex64)
    b = np.array([-0j, 0j, complex(0.0, -0.0), complex(-0.0, -0.0)], np.complex64)
    check(lambda x, y: x / y, a, b, exact=True)


def test_complex_log_subnormal_imag() -> None:
    """JAX expands complex log into real ops, its argument an `atan2(imag, real)`: glibc's
    atan2f returns y unchanged for x = 1 (log(1+1e-40j) keeps 9.99e-41j) and divides 0 / 0
    under DAZ for two subnormals (NaN); the real part's log(max |part|) is log(0) = -inf."""
    a = np.array([complex(1.0, 1e-40), complex(-1.0, 1e-42), complex(1e-40, 1e-40),
                  complex(0.5, -1e-39), complex(-2.0, 1e-40), complex(1e-40, -3.0),
                  complex(-1e-40, 0.0)], np.complex64)
    check(lambda x: jnp.log(x), a, exact=True, signs=True)
    b = np.array([complex(1.0, 1e-310), complex(-2.0, 1e-310), complex(1e-310, 1e-310),
                  complex(-2.0, -1e-310), complex(1e-310, -3.0)], np.complex128)
    check(lambda x: jnp.log(x), b, exact=True, signs=True)


@pytest.mark.parametrize(("lhs", "rhs"), [("c64", "c64"), ("c64", "f32"), ("f32", "c64"),
                                         ("c128", "s8"), ("u8", "c64")])
@pytest.mark.parametrize("pipeline", ["xla", None])
def test_complex_convolution_instruction(lhs: str, rhs: str, pipeline: str | None) -> None:
    """A complex `convolution` instruction as written in HLO (jax.jit splits a complex conv into
    real ones, so `test_complex_conv` never builds one): the cpu backend gives the
    interpreter's values or refuses it naming the instruction, never a real-typed kernel's."""
    import hlofuse
    from hlofuse.backends import interpreter
    from hlofuse.backends.cpu.cexpr import UnsupportedOpError
    from hlofuse.text import parse

    out = "c128" if "c128" in (lhs, rhs) else "c64"
    text = f"""HloModule complex_conv
ENTRY e {{
  x = {lhs}[1,6,2] parameter(0)
  k = {rhs}[3,2,4] parameter(1)
  ROOT conv = {out}[1,4,4] convolution(x, k), window={{size=3}}, dim_labels=b0f_0io->b0f
}}
"""
    npt = {"c64": np.complex64, "c128": np.complex128, "f32": np.float32, "s8": np.int8,
           "u8": np.uint8}
    x, k = _arr(npt[lhs], (1, 6, 2)), _arr(npt[rhs], (3, 2, 4))
    want = interpreter.run(parse(text), x, k)[0]
    ref = np.stack([np.einsum("wi,wio->o", x[0, o:o + 3].astype(complex), k.astype(complex))
                    for o in range(4)])[None]
    np.testing.assert_allclose(want, ref, rtol=1e-6)  # (the interpreter keeps both parts)
    try:
        got = hlofuse.compile(text, pipeline=pipeline, backend="cpu")(x, k)[0]
    except UnsupportedOpError as exc:
        assert "instruction conv" in str(exc)
        return
    np.testing.assert_allclose(got, want, rtol=1e-6)


SUB = ["int4", "uint4", "float8_e4m3fn", "float8_e5m2"]


@pytest.mark.parametrize("src", SUB)
@pytest.mark.parametrize("dst", ["float32", "bfloat16", "int32", "int8"])
def test_subbyte_convert(src: str, dst: str) -> None:
    x = np.arange(-3, 5).astype(getattr(ml_dtypes, src))
    _run_or_refuse(lambda a: lax.convert_element_type(a, _dt(dst) if dst == "bfloat16" else dst), x)


@pytest.mark.parametrize("src,dst,shape", [("uint4", "bfloat16", (2, 4)),
                                           ("int4", "bfloat16", (2, 4)),
                                           ("uint8", "float8_e4m3fn", (4,)),
                                           ("float8_e5m2", "int8", (4,))])
def test_subbyte_bitcast(src: str, dst: str, shape: tuple[int, ...]) -> None:
    x = np.arange(int(np.prod(shape))).reshape(shape).astype(getattr(ml_dtypes, src, src))
    tgt = ml_dtypes.bfloat16 if dst == "bfloat16" else getattr(ml_dtypes, dst, dst)
    _run_or_refuse(lambda a: lax.bitcast_convert_type(a, tgt), x)


def _run_or_refuse(f: Callable[..., Any], *args: np.ndarray) -> None:
    """Match jax.jit, or refuse with an hlofuse error (never a bare Python exception)."""
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(f)(*args))]
    for backend in BACKENDS:
        try:
            got = run_on(backend, f, args)
        except HloError:
            continue
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype, backend
            np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8), err_msg=backend)


@pytest.mark.parametrize("x", [[-0.0, 0.0], [0.0, -0.0], [-0.0, -0.0], [0.0, 0.0]])
def test_signed_zero_reduce(x: list[float]) -> None:
    a = np.array(x, np.float32)
    check(lambda v: (jnp.max(v), jnp.min(v)), a, exact=True, signs=True)


@pytest.mark.parametrize("n", [8, 37, 256])
def test_signed_zero_max_min_in_vector_loops(n: int) -> None:
    """Long enough to vectorize: the vector max/min and the vectorized reductions combine
    equal zeros as the scalar ones do (3 x -0 then +0s: min -0, max +0, in either order)."""
    a = np.zeros(n, np.float32)
    a[: max(3, n // 3)] = -0.0
    b = a[::-1].copy()
    check(lambda v, w: (jnp.max(v), jnp.min(v), jnp.max(w), jnp.min(w),
                        jnp.maximum(v, w), jnp.minimum(v, w)), a, b, exact=True, signs=True)


@pytest.mark.parametrize("out", [jnp.int8, jnp.uint8, jnp.int32, jnp.uint32])
@pytest.mark.parametrize("shape", [(2,), (3, 5), (40, 70)])
def test_float_dot_with_an_integral_result_sums_floats_then_converts(out: Any,
                                                                     shape: tuple) -> None:
    """XLA multiplies and sums float operands as floats and converts the sum (truncating,
    saturating, NaN -> 0): [1.5, -2.7] . [1.5, 1] -> s8 is 0, not 1*1 + (-2)*1 = -1."""
    rng = np.random.default_rng(len(shape))
    # quarters and halves: every sum is exact in f32, in any order, so results compare exactly
    a = (rng.integers(-40, 40, shape) * 0.5).astype(np.float32)
    b = (rng.integers(-40, 40, shape[::-1]) * 0.25).astype(np.float32)
    if len(shape) == 1:
        a[:2], b[:2] = [1.5, -2.7], [1.5, 1.0]
        b = b[::-1].copy() if shape[0] > 2 else b
    check(lambda x, y: lax.dot(x, y, preferred_element_type=out), a, b, exact=True)


# ----- complex power: XLA's elemental formula (fuzz_findings.md classes 7 and 12) ------------

_SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, np.inf, -np.inf, np.nan]


def _special_pairs(dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    zs = [complex(r, i) for r in _SPECIAL for i in _SPECIAL]
    return (np.array([x for x in zs for _ in zs], dtype), np.array(zs * len(zs), dtype))


def _check_specials(f: Callable[..., Any], *args: np.ndarray) -> None:
    """NaN, inf and zero parts exactly where jax.jit has them (signs included); other values
    within 1e-5."""
    want = np.asarray(jax.jit(f)(*args))
    for backend in BACKENDS:
        got = run_on(backend, f, args)[0]
        assert got.dtype == want.dtype, backend
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=backend)
            exact = ~np.isfinite(w) | (w == 0)
            np.testing.assert_array_equal(g[exact & ~np.isnan(w)], w[exact & ~np.isnan(w)],
                                          err_msg=backend)
            np.testing.assert_array_equal(np.signbit(g[exact & ~np.isnan(w)]),
                                          np.signbit(w[exact & ~np.isnan(w)]), err_msg=backend)
            np.testing.assert_allclose(g[~exact], w[~exact], rtol=1e-5, atol=1e-6,
                                       err_msg=backend)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_power_special_values(dtype: str) -> None:
    """Every pair of parts from 0, -0, +-1, +-2, 0.5, +-inf, NaN (10,000 powers): XLA's
    formula gives nan+nanj where C99's cpow has inf+nanj, and its own cut-offs."""
    _check_specials(lax.pow, *_special_pairs(np.dtype(dtype)))


def test_complex_power_overflows_in_component_type() -> None:
    """c64 computes in f32: |1e20|^2 overflows, inf * sin(0) is NaN."""
    a = np.array([1e20 + 0j, 1e20 + 1j, 3e19 - 2e19j, 2 + 0j], np.complex64)
    b = np.array([2 + 0j, 2 + 0j, 2 + 0.5j, 130 + 0j], np.complex64)
    _check_specials(lax.pow, a, b)


@pytest.mark.parametrize("dtype,tiny", [("complex64", 1e-40), ("complex128", 1e-310)])
def test_complex_power_subnormal_part(dtype: str, tiny: float) -> None:
    """The base's argument is atan2 on the unflushed parts (glibc under DAZ): (-2+1e-310j)^0.5
    is -1.414j in c128 (atan2 gives -pi), +1.414j in c64 (atan2f gives +pi); complex(-2, -0.0)
    keeps its sign (Python's `-2-0j` has imaginary part +0)."""
    a = np.array([complex(-2, tiny), complex(-2, -tiny), complex(tiny, tiny), complex(0, tiny),
                  complex(-tiny, 0), complex(-2, -0.0), complex(-2, 0.0), complex(1, tiny),
                  complex(tiny, -3)], dtype)
    b = np.array([0.5 + 0j, 0.5 + 0j, 0.5 + 0j, 0.5 + 0j, 2 + 0j, 0.5 + 0j, 0.5 + 0j,
                  1.5 + 0.5j, 0.25 - 1j], dtype)
    _check_specials(lax.pow, a, b)


# ----- 20k fuzz run: complex division by an infinite or huge divisor -------------------------
# XLA's EmitComplexDivide: Smith's method with the parts divided by the denominator (the cpu
# backend multiplied by its reciprocal, subnormal and flushed for a divisor near 1e308), then,
# where both parts are NaN, C99's recovery: zero divisor, infinite numerator over a finite
# divisor, finite numerator over an infinite divisor (1 / (inf+infj) = 0; logistic(-inf+1j)).

# (finite parts whose products are exact: XLA contracts Smith's steps to FMAs, so a huge part
# gives z / z an imaginary -0 where the separate rounding gives +0)
_SPECIAL = [0.0, -0.0, 1.0, -2.0, 0.5, 1e-310, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("dt", [np.complex128, np.complex64], ids=["c128", "c64"])
def test_complex_divide_special_values_as_jax(dt: Any) -> None:
    zs = [complex(r, i) for r in _SPECIAL for i in _SPECIAL]
    a = np.array([p for p in zs for _ in zs], dt)
    b = np.array([q for _ in zs for q in zs], dt)
    if dt is np.complex128:  # the fuzz case: 2.4 / 1e308 is 2.4e-308, not a flushed -0
        a = np.concatenate([a, np.array([2.4 - 0j, 1e-300 + 3e-300j, -7 + 1j], dt)])
        b = np.concatenate([b, np.array([1e308 + 1e300j, 1e308 - 1e308j, 1.5e308 + 0j], dt)])
    want = np.asarray(jax.jit(lambda x, y: x / y)(a, b))
    for backend in BACKENDS:
        got = run_on(backend, lambda x, y: x / y, [a, b])[0]
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=backend)
            fin = ~np.isnan(w)
            np.testing.assert_allclose(g[fin], w[fin], rtol=1e-6, atol=0, err_msg=backend)
            zero = fin & (w == 0)
            np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(w[zero]),
                                          err_msg=f"{backend}: sign of zero")


@pytest.mark.parametrize("dt", [np.complex128, np.complex64], ids=["c128", "c64"])
def test_complex_logistic_of_infinite_real_part(dt: Any) -> None:
    z = np.array([-np.inf + 1j, -np.inf - 2j, -np.inf + 1e30j, -800 + 3j, 800 - 1j, 2 + 1j], dt)
    want = np.asarray(jax.jit(jax.lax.logistic)(z))
    for backend in BACKENDS:
        got = run_on(backend, jax.lax.logistic, [z])[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=0, err_msg=backend)
        np.testing.assert_array_equal(np.signbit(got.real), np.signbit(want.real),
                                      err_msg=backend)


# ----- 20k fuzz run: complex rsqrt is XLA's polar form ---------------------------------------
# r * (cos(-t/2) + i sin(-t/2)), not 1 / sqrt(z): rsqrt(1+0j) = 1-0j, rsqrt(inf+infj) = 0-0j
# (the division gave NaN), rsqrt(-2+0j) in c64 has the real part r * cos(-atan2f(0, -2) / 2),
# -3.1e-8 (atan2f's pi is above pi); a subnormal part goes through the DAZ atan2 (flush.py).


@pytest.mark.parametrize("dt", [np.complex128, np.complex64], ids=["c128", "c64"])
def test_complex_rsqrt_polar_form_as_jax(dt: Any) -> None:
    vals = [0.0, -0.0, 1.0, -2.0, 1e30, 1e-310, 1e-40, np.inf, -np.inf, np.nan]
    rng = np.random.default_rng(2812)
    z = np.concatenate([np.array([complex(r, i) for r in vals for i in vals], dt),
                        (rng.standard_normal(64) + 1j * rng.standard_normal(64)).astype(dt)])
    want = np.asarray(jax.jit(lax.rsqrt)(z))
    for backend in BACKENDS:
        got = run_on(backend, lax.rsqrt, [z])[0]
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=backend)
            fin = ~np.isnan(w)
            np.testing.assert_allclose(g[fin], w[fin], rtol=1e-6, atol=0, err_msg=backend)
            zero = fin & (w == 0)
            np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(w[zero]),
                                          err_msg=f"{backend}: sign of zero")
