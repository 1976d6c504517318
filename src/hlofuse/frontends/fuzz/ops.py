"""The fuzzer's program generators: one random JAX program per call, over the `lax` primitives.

`generate(rng)` picks an op family (`FAMILIES`, weighted), an element type the family takes and
random parameters, and returns a `Program` (`base.py`): a function of arrays, its argument
arrays and the tolerance class its outputs are compared under (`compare.py`). This module holds
the elementwise families; `ops_array.py` the shaping, indexing, sorting, dot, convolution and
fft ones, `ops_reduce.py` the reductions, windows, scans and pooling gradients, `ops_control.py`
loops, branches, calls, barriers and random bits. Conditions enforced:

* every op is drawn over every element type JAX takes for it (bool, sub-byte integers, the 8-
  and 4-bit floats and complex numbers included), as real JAX code writes it (jnp or lax);
* the parameters XLA defines but programs rarely use are drawn on purpose: negative padding,
  interior padding, reversed axes, strided slices, out-of-range and negative indices in dynamic
  slices, gathers and scatters (every `mode`), mixed operand types with
  `preferred_element_type` in dots, every element type pair in converts and bitcasts, scalar
  bounds of clamp and scalar predicates of select;
* a program is a pure function of its arguments (no PRNG state, no host callbacks).

A program JAX itself rejects at trace time (an element type an op does not take) is not an error:
`runner.py` counts it as rejected and draws the next one. The generator never imports hlofuse's
core and the core never imports it (JAX lives under `frontends/`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax import lax

from hlofuse.frontends.fuzz import ops_array, ops_control, ops_reduce
from hlofuse.frontends.fuzz.base import (
    ALL,
    ANY_FLOAT,
    ANY_INT,
    BOOL,
    COMPLEX,
    EXACT,
    FLOAT,
    FP8,
    NUMERIC,
    REAL,
    SINT,
    SUBBYTE,
    SUBBYTE_S,
    TRANS,
    UINT,
    ULP,
    Program,
    bits,
    has_subnormal,
    pick,
    shape,
    values,
)

__all__ = ["FAMILIES", "Program", "generate", "jax_x64"]

_UNARY: dict[str, tuple[Callable[..., Any], tuple[np.dtype, ...], str]] = {
    "neg": (lax.neg, ANY_INT + ANY_FLOAT + COMPLEX, EXACT),
    "abs": (lax.abs, SINT + ANY_FLOAT + COMPLEX, ULP),
    "sign": (lax.sign, SINT + SUBBYTE_S + UINT + ANY_FLOAT + COMPLEX, ULP),
    "floor": (lax.floor, ANY_FLOAT, EXACT), "ceil": (lax.ceil, ANY_FLOAT, EXACT),
    "round_afz": (lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), ANY_FLOAT, EXACT),
    "round_even": (lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), ANY_FLOAT,
                   EXACT),
    "is_finite": (lax.is_finite, ANY_FLOAT, EXACT),
    "not": (lax.bitwise_not, BOOL + ANY_INT, EXACT),
    "clz": (lax.clz, ANY_INT, EXACT), "popcnt": (lax.population_count, ANY_INT, EXACT),
    "real": (lax.real, COMPLEX, EXACT), "imag": (lax.imag, COMPLEX, EXACT),
    "conj": (lax.conj, COMPLEX, EXACT),
    "sqrt": (lax.sqrt, ANY_FLOAT + COMPLEX, ULP), "rsqrt": (lax.rsqrt, ANY_FLOAT + COMPLEX, ULP),
    "cbrt": (lax.cbrt, ANY_FLOAT, ULP),
    "exp": (lax.exp, ANY_FLOAT + COMPLEX, TRANS),
    "expm1": (lax.expm1, ANY_FLOAT + COMPLEX, TRANS),
    "exp2": (lax.exp2, ANY_FLOAT, TRANS),
    "log": (lax.log, ANY_FLOAT + COMPLEX, TRANS),
    "log1p": (lax.log1p, ANY_FLOAT + COMPLEX, TRANS),
    "sin": (lax.sin, ANY_FLOAT + COMPLEX, TRANS), "cos": (lax.cos, ANY_FLOAT + COMPLEX, TRANS),
    "tan": (lax.tan, ANY_FLOAT + COMPLEX, TRANS), "tanh": (lax.tanh, ANY_FLOAT + COMPLEX, TRANS),
    "logistic": (lax.logistic, ANY_FLOAT + COMPLEX, TRANS),
    "atan": (lax.atan, ANY_FLOAT, TRANS), "asin": (lax.asin, ANY_FLOAT, TRANS),
    "acos": (lax.acos, ANY_FLOAT, TRANS), "sinh": (lax.sinh, ANY_FLOAT, TRANS),
    "cosh": (lax.cosh, ANY_FLOAT, TRANS), "asinh": (lax.asinh, ANY_FLOAT, TRANS),
    "acosh": (lax.acosh, ANY_FLOAT, TRANS), "atanh": (lax.atanh, ANY_FLOAT, TRANS),
    "erf": (lax.erf, ANY_FLOAT, TRANS), "erf_inv": (lax.erf_inv, ANY_FLOAT, TRANS),
    "square": (lax.square, REAL + SUBBYTE + FP8 + COMPLEX, ULP),
}

_BINARY: dict[str, tuple[Callable[..., Any], tuple[np.dtype, ...], str]] = {
    "add": (lax.add, NUMERIC + SUBBYTE + FP8, ULP), "sub": (lax.sub, NUMERIC + SUBBYTE + FP8, ULP),
    "mul": (lax.mul, NUMERIC + SUBBYTE + FP8, ULP), "div": (lax.div, NUMERIC + SUBBYTE + FP8, ULP),
    "rem": (lax.rem, REAL + SUBBYTE + FP8, ULP),
    "max": (lax.max, BOOL + REAL + SUBBYTE + FP8, EXACT),
    "min": (lax.min, BOOL + REAL + SUBBYTE + FP8, EXACT),
    "pow": (lax.pow, ANY_FLOAT + COMPLEX, TRANS), "atan2": (lax.atan2, ANY_FLOAT, TRANS),
    "nextafter": (lax.nextafter, ANY_FLOAT, EXACT),
    "and": (lax.bitwise_and, BOOL + ANY_INT, EXACT), "or": (lax.bitwise_or, BOOL + ANY_INT, EXACT),
    "xor": (lax.bitwise_xor, BOOL + ANY_INT, EXACT),
    "shl": (lax.shift_left, ANY_INT, EXACT), "shr_l": (lax.shift_right_logical, ANY_INT, EXACT),
    "shr_a": (lax.shift_right_arithmetic, ANY_INT, EXACT),
    "mulhi": (lax.mulhi, ANY_INT, EXACT),
    "complex": (lax.complex, (np.dtype("float32"), np.dtype("float64")), EXACT),
}

_COMPARE = {"eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge}


# XLA computes complex sqrt and rsqrt in polar form (|z|, atan2, cos and sin of the half angle):
# composed transcendental functions, whose last bits follow the math library (3 ulps measured
# for c128 rsqrt on cpu), not the correctly rounded real sqrt of the ULP class
_COMPLEX_TRANS = frozenset({"sqrt", "rsqrt"})


def _unary(rng: np.random.Generator) -> Program:
    name = pick(rng, sorted(_UNARY))
    fn, dts, tol = _UNARY[name]
    dt = pick(rng, dts)
    if dt.kind == "c" and name in _COMPLEX_TRANS:
        tol = TRANS
    x = values(rng, shape(rng), dt)
    return Program("unary", fn, [x], tol, f"{name}[{dt.name}]{list(x.shape)}")


def _binary(rng: np.random.Generator) -> Program:
    name = pick(rng, sorted(_BINARY))
    fn, dts, tol = _BINARY[name]
    dt, shp = pick(rng, dts), shape(rng)
    args = [values(rng, shp, dt), values(rng, shp, dt)]
    tags: frozenset[str] = frozenset()
    if name == "pow" and dt.kind == "f" and any(has_subnormal(a) for a in args):
        tags = frozenset({"pow-subnormal"})
    return Program("binary", fn, args, tol, f"{name}[{dt.name}]{list(shp)}", tags)


def _compare(rng: np.random.Generator) -> Program:
    dt, shp = pick(rng, BOOL + NUMERIC + SUBBYTE + FP8), shape(rng)
    name = pick(rng, ("eq", "ne") if dt.kind == "c" else sorted(_COMPARE))  # lax orders no complex
    return Program("compare", _COMPARE[name], [values(rng, shp, dt), values(rng, shp, dt)],
                   EXACT, f"compare-{name}[{dt.name}]{list(shp)}")


def _select_clamp(rng: np.random.Generator) -> Program:
    """select with an array or a scalar predicate; clamp with each bound a scalar or an array."""
    dt, shp = pick(rng, ALL), shape(rng)
    if rng.random() < 0.5:
        p = values(rng, () if rng.random() < 0.25 else shp, np.dtype(bool))
        return Program("select", lax.select, [p, values(rng, shp, dt), values(rng, shp, dt)],
                       EXACT, f"select[{dt.name}]{list(shp)}{'' if p.ndim else 'p()'}")
    lo = values(rng, () if rng.random() < 0.5 else shp, dt)
    hi = values(rng, () if rng.random() < 0.5 else shp, dt)
    return Program("clamp", lax.clamp, [lo, values(rng, shp, dt), hi], EXACT,
                   f"clamp[{dt.name}]{list(shp)}lo{list(lo.shape)}hi{list(hi.shape)}")


def _convert(rng: np.random.Generator) -> Program:
    src, dst = pick(rng, ALL), pick(rng, ALL)
    x = values(rng, shape(rng), src)
    tags = frozenset({"subbyte-convert"}) if src in SUBBYTE or dst in SUBBYTE else frozenset()
    return Program("convert", lambda a: lax.convert_element_type(a, dst), [x], EXACT,
                   f"convert[{src.name}->{dst.name}]{list(x.shape)}", tags)


def _bitcast(rng: np.random.Generator) -> Program:
    src = pick(rng, ALL)
    nbits = bits(src)
    same = [d for d in ALL if d != np.dtype(bool) and bits(d) == nbits]
    wider = [d for d in ALL if d != np.dtype(bool) and bits(d) in (nbits * 2, nbits * 4)
             and bits(d) >= 8]
    narrow = [d for d in ALL if d != np.dtype(bool) and bits(d) * 2 == nbits and bits(d) >= 8]
    dst = pick(rng, same + wider + narrow) if src != np.dtype(bool) else np.dtype("int8")
    shp = shape(rng, int(rng.integers(0, 3)))
    if bits(dst) > nbits:
        shp = (*shp, bits(dst) // nbits)
    x = values(rng, shp, src)
    tags = frozenset({"subbyte-convert"}) if src in SUBBYTE or dst in SUBBYTE else frozenset()
    return Program("bitcast", lambda a: lax.bitcast_convert_type(a, dst), [x], EXACT,
                   f"bitcast[{src.name}->{dst.name}]{list(shp)}", tags)


def _reduce_precision(rng: np.random.Generator) -> Program:
    dt = pick(rng, FLOAT + FP8)
    e, m = int(rng.integers(1, 9)), int(rng.integers(0, 24))
    x = values(rng, shape(rng), dt)
    return Program("reduce_precision", lambda a: lax.reduce_precision(a, e, m), [x], EXACT,
                   f"reduce_precision[{dt.name},e{e}m{m}]{list(x.shape)}")


_Gen = Callable[[np.random.Generator, frozenset[str]], Program]

# the families a nested jax.jit wraps (single ops whose types span every element type)
_CALLABLE = ("unary", "binary", "compare", "select", "convert", "shaping")
# family -> (weight, generator); generators taking `o` get the run's excluded tags
FAMILIES: dict[str, tuple[float, _Gen]] = {
    "unary": (6, lambda r, o: _unary(r)), "binary": (5, lambda r, o: _binary(r)),
    "compare": (2, lambda r, o: _compare(r)), "select": (2, lambda r, o: _select_clamp(r)),
    "convert": (4, lambda r, o: _convert(r)), "bitcast": (1.5, lambda r, o: _bitcast(r)),
    "reduce_precision": (0.7, lambda r, o: _reduce_precision(r)),
    "shaping": (5, lambda r, o: ops_array.shaping(r)),
    "indexing": (4, lambda r, o: ops_array.indexing(r, "u64-index" in o)),
    "sort": (1.5, lambda r, o: ops_array.sort(r)), "topk": (0.7, lambda r, o: ops_array.topk(r)),
    "dot": (2.5, lambda r, o: ops_array.dot(r, "complex-dot" in o)),
    "conv": (1.5, lambda r, o: ops_array.conv(r)), "fft": (0.7, lambda r, o: ops_array.fft(r)),
    "reduce": (3, lambda r, o: ops_reduce.reduce(r)),
    "window": (2, lambda r, o: ops_reduce.window(r)),
    "cumulative": (1.5, lambda r, o: ops_reduce.cumulative(r)),
    "pool_grad": (1, lambda r, o: ops_reduce.pool_grad(r)),
    "loop": (1.5, lambda r, o: ops_control.loop(r)),
    "branch": (1.5, lambda r, o: ops_control.branch(r)),
    "scan": (1, lambda r, o: ops_control.scan(r)),
    "barrier": (0.5, lambda r, o: ops_control.barrier(r)),
    "rng": (0.7, lambda r, o: ops_control.rng_bits(r)),
    "call": (1, lambda r, o: ops_control.nested_call(r, _draw(r, o, _CALLABLE))),
}


def _draw(rng: np.random.Generator, exclude: frozenset[str],
          names: tuple[str, ...] | None = None) -> Program:
    names = tuple(sorted(FAMILIES)) if names is None else names
    w = np.array([FAMILIES[n][0] for n in names], dtype=np.float64)
    return FAMILIES[names[int(rng.choice(len(names), p=w / w.sum()))]][1](rng, exclude)


def generate(rng: np.random.Generator, exclude: frozenset[str] = frozenset()) -> Program:
    """One random program; programs tagged with a class in `exclude` are redrawn."""
    while True:
        prog = _draw(rng, exclude)
        if not prog.tags & exclude:
            return prog


def jax_x64() -> Any:
    """The context programs are traced and run in (64-bit types on)."""
    return jax.enable_x64(True)
