"""The fuzzer's reduction families: reductions (single and variadic, argmax / argmin), windowed
reductions, cumulative scans and pooling gradients (see `ops.py` for the registry).

Conditions enforced:

* reductions take every element type JAX reduces (bool, sub-byte integers, the 8- and 4-bit
  floats and complex included), through jnp (which widens small integer sums, as user code
  gets them) or through lax (in the type itself), over any subset of the axes;
* variadic reductions (`lax.reduce` of two or three operands of different types, each with its
  own monoid) and argmax / argmin (jnp: a (value, index) reduce whose tie keeps the lowest index
  and whose NaN wins);
* windows: max, min, add, mul, and, or, with strides, padding and base and window dilation;
* cumulative sums, products, maxima, minima and log-sum-exps (reduce-window forms on CPU), either
  direction;
* max and min pooling gradients (`jax.vjp` of a reduce-window max / min with a random cotangent:
  XLA's select-and-scatter), 1-D and 2-D, VALID, SAME or explicit padding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from hlofuse.frontends.fuzz.base import (
    ACCUM,
    BOOL,
    COMPLEX,
    EXACT,
    FLOAT,
    FP8,
    NUMERIC,
    REAL,
    SUBBYTE,
    Program,
    has_inf,
    inexact,
    max_identity,
    min_identity,
    one,
    pick,
    shape,
    values,
)

__all__ = ["cumulative", "pool_grad", "reduce", "window"]

_Monoid = tuple[Callable[[Any, Any], Any], Callable[[np.dtype], np.ndarray]]
_MONOIDS: dict[str, _Monoid] = {
    "add": (lax.add, lambda d: np.zeros((), d)), "mul": (lax.mul, one),
    "max": (lax.max, max_identity), "min": (lax.min, min_identity),
    "and": (lax.bitwise_and, lambda d: np.asarray(~np.zeros((), d)).astype(d)
            if d.kind in "iu" else np.asarray(True)),
    "or": (lax.bitwise_or, lambda d: np.zeros((), d)),
}


def _monoids(dt: np.dtype) -> tuple[str, ...]:
    """The monoids JAX reduces `dt` with (complex min/max only by tag: order-dependent NaN)."""
    if dt == np.dtype(bool):
        return ("and", "or", "max", "min")
    if dt.kind in "iu" or dt in SUBBYTE:
        return ("add", "mul", "max", "min", "and", "or") if dt.kind in "iu" else (
            "add", "mul", "max", "min")
    if dt.kind == "c":
        return ("add", "mul")
    return ("add", "mul", "max", "min")


def _tol(op: str, dt: np.dtype) -> str:
    return ACCUM if op in ("add", "mul") and inexact(dt) else EXACT


def _dims(rng: np.random.Generator, rank: int) -> tuple[int, ...]:
    return tuple(d for d in range(rank) if rng.random() < 0.6) or (0,)


_JNP: dict[str, Callable[..., Any]] = {
    "add": jnp.sum, "mul": jnp.prod, "max": jnp.max, "min": jnp.min, "and": jnp.all,
    "or": jnp.any}
_LAX: dict[str, Callable[..., Any]] = {
    "add": lax.reduce_sum, "mul": lax.reduce_prod, "max": lax.reduce_max,
    "min": lax.reduce_min, "and": lax.reduce_and, "or": lax.reduce_or}


def reduce(rng: np.random.Generator) -> Program:
    shp = shape(rng, int(rng.integers(1, 4)))
    kind = pick(rng, ("monoid", "monoid", "variadic", "arg"))
    if kind == "variadic":
        # XLA's CPU refuses sub-byte operands among others (their layouts' element sizes
        # differ: a RET_CHECK in the reduce decomposer) and its verifier floating-point operands
        # of different precisions in one reduce
        dts = [pick(rng, BOOL + NUMERIC + FP8) for _ in range(int(rng.integers(2, 4)))]
        floats = [d for d in dts if inexact(d)]
        dts = [floats[0] if inexact(d) else d for d in dts]
        ops = [pick(rng, _monoids(d)) for d in dts]
        xs = [values(rng, shp, d, special=0.05) for d in dts]
        inits = [_MONOIDS[o][1](d) for o, d in zip(ops, dts, strict=True)]
        dims = _dims(rng, len(shp))

        def comp(a: Any, b: Any) -> tuple[Any, ...]:
            return tuple(_MONOIDS[o][0](p, q) for o, p, q in zip(ops, a, b, strict=True))

        tol = ACCUM if any(_tol(o, d) == ACCUM for o, d in zip(ops, dts, strict=True)) else EXACT
        names = ",".join(f"{o}:{d.name}" for o, d in zip(ops, dts, strict=True))
        return Program("reduce", lambda *a: lax.reduce(a, tuple(inits), comp, dims), xs, tol,
                       f"reduce-variadic[{names}]{list(shp)}{dims}")
    if kind == "arg":  # (a variadic reduce: XLA's CPU refuses 2-bit operands, as above)
        dt = pick(rng, BOOL + NUMERIC + SUBBYTE[1::2] + FP8)
        x = values(rng, shp, dt, special=0.05)
        name, ax, keep = pick(rng, ("argmax", "argmin")), int(rng.integers(0, len(shp))), bool(
            rng.random() < 0.3)
        f = getattr(jnp, name)
        tags = frozenset({"complex-minmax"}) if dt.kind == "c" else frozenset()
        return Program("reduce", lambda a: f(a, axis=ax, keepdims=keep), [x], EXACT,
                       f"reduce-{name}[{dt.name}]{list(shp)}a{ax}", tags)
    dt = pick(rng, BOOL + NUMERIC + SUBBYTE + FP8)
    op = pick(rng, _monoids(dt))
    x = values(rng, shp, dt, special=0.05)
    dims = _dims(rng, len(shp))
    # jnp where it takes the type (it widens bool and small integer sums), lax in the type
    via = "lax" if dt in SUBBYTE or rng.random() < 0.4 else "jnp"
    fn = (lambda a: _LAX[op](a, dims)) if via == "lax" else (lambda a: _JNP[op](a, axis=dims))
    return Program("reduce", fn, [x], _tol(op, dt),
                   f"reduce-{op}-{via}[{dt.name}]{list(shp)}{dims}")


def window(rng: np.random.Generator) -> Program:
    dt = pick(rng, BOOL + REAL + SUBBYTE + FP8 + COMPLEX)
    op = pick(rng, _monoids(dt))
    shp = shape(rng, int(rng.integers(1, 4)))
    x = values(rng, shp, dt, special=0.05)
    r = len(shp)
    win = tuple(int(rng.integers(1, 4)) for _ in shp)
    strides = tuple(int(rng.integers(1, 3)) for _ in shp)
    pads = tuple((int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in shp)
    base = tuple(int(rng.integers(1, 3)) if rng.random() < 0.2 else 1 for _ in range(r))
    wdil = tuple(int(rng.integers(1, 3)) if rng.random() < 0.2 else 1 for _ in range(r))
    fn, init = _MONOIDS[op][0], _MONOIDS[op][1](dt)
    padded = any(lo or hi for lo, hi in pads)
    return Program("reduce_window", lambda a: lax.reduce_window(a, init, fn, win, strides, pads,
                                                                base, wdil),
                   [x], _tol(op, dt),
                   f"reduce_window-{op}[{dt.name}]{list(shp)}w{win}s{strides}p{pads}"
                   f"b{base}d{wdil}", _window_tags(op, dt, padded))


def _window_tags(op: str, dt: np.dtype, padded: bool) -> frozenset[str]:
    """fp8-window-pad: a padded max / min window in an 8-/4-bit float without infinities (open
    in benchmarks/results/fuzz_findings.md: the cpu backend gives NaN)."""
    return frozenset({"fp8-window-pad"}) if (
        op in ("max", "min") and padded and dt in FP8 and not has_inf(dt)) else frozenset()


def cumulative(rng: np.random.Generator) -> Program:
    name = pick(rng, ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"))
    types = {"cumsum": REAL + SUBBYTE + FP8 + COMPLEX, "cumprod": REAL + SUBBYTE + FP8 + COMPLEX,
             "cummax": REAL + SUBBYTE + FP8, "cummin": REAL + SUBBYTE + FP8,
             "cumlogsumexp": FLOAT + FP8}[name]
    dt = pick(rng, types)
    shp = shape(rng, int(rng.integers(1, 4)))
    x = values(rng, shp, dt, special=0.05)
    ax, rev = int(rng.integers(0, len(shp))), bool(rng.random() < 0.3)
    f = getattr(lax, name)
    tol = ACCUM if name not in ("cummax", "cummin") and inexact(dt) else EXACT
    return Program("cumulative", lambda a: f(a, axis=ax, reverse=rev), [x], tol,
                   f"{name}[{dt.name}]{list(shp)}a{ax}{'r' if rev else ''}",
                   _window_tags(name[3:], dt, shp[ax] > 1))


# pooling is differentiated in the float types JAX linearizes (e8m0 it cannot)
_POOL_TYPES = FLOAT + tuple(d for d in FP8 if d != np.dtype(ml_dtypes.float8_e8m0fnu))


def pool_grad(rng: np.random.Generator) -> Program:
    """The gradient of a max or min pool: what jax.grad of a CNN's pooling layer lowers to."""
    dt = pick(rng, _POOL_TYPES)
    two = rng.random() < 0.5
    shp = (int(rng.integers(1, 3)), *(int(rng.integers(1, 7)) for _ in range(2 if two else 1)),
           int(rng.integers(1, 3)))
    win = (1, *(int(rng.integers(1, 4)) for _ in shp[1:-1]), 1)
    strides = (1, *(int(rng.integers(1, 3)) for _ in shp[1:-1]), 1)
    padding: Any = pick(rng, ("VALID", "SAME", "explicit"))
    if padding == "explicit":
        padding = ((0, 0), *((int(rng.integers(0, 2)), int(rng.integers(0, 2)))
                             for _ in shp[1:-1]), (0, 0))
    if padding == "VALID" and any(w > d for w, d in zip(win, shp, strict=True)):
        padding = "SAME"
    op = pick(rng, ("max", "min"))
    fn, init = _MONOIDS[op][0], _MONOIDS[op][1](dt)

    def pool(a: Any) -> Any:
        return lax.reduce_window(a, init, fn, win, strides, padding)

    x = values(rng, shp, dt, special=0.05)
    ct = values(rng, jax.eval_shape(pool, x).shape, dt, special=0.02)
    return Program("pool_grad", lambda a, c: jax.vjp(pool, a)[1](c)[0], [x, ct], ACCUM,
                   f"pool_grad-{op}[{dt.name}]{list(shp)}w{win}s{strides}p{padding}")

