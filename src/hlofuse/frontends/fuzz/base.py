"""The fuzzer's vocabulary: JAX's element types by family, the generated `Program`, random shapes
and random values with each type's special values mixed in.

Conditions enforced (every generator draws through these):

* shapes have rank 0-3 and dimensions 0-5 (empty dimensions included, `shape`);
* float inputs carry NaN, +-inf, -0.0, subnormals and values near the type's limits; integer
  inputs (sub-byte ones too) carry the type's minimum, maximum, 0 and -1 (`values`);
* `step` is a cheap update JAX takes for every element type (bool, sub-byte integers, 8- and
  4-bit floats and complex numbers included), for carried state of loops and branches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
from jax import lax

BOOL = (np.dtype(bool),)
SINT = tuple(np.dtype(t) for t in ("int8", "int16", "int32", "int64"))
UINT = tuple(np.dtype(t) for t in ("uint8", "uint16", "uint32", "uint64"))
SUBBYTE = tuple(np.dtype(getattr(ml_dtypes, t)) for t in ("int2", "int4", "uint2", "uint4"))
FLOAT = (np.dtype("float16"), np.dtype(ml_dtypes.bfloat16), np.dtype("float32"),
         np.dtype("float64"))
FP8 = tuple(np.dtype(getattr(ml_dtypes, t)) for t in (
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3", "float8_e3m4", "float8_e4m3fnuz",
    "float8_e5m2fnuz", "float8_e4m3b11fnuz", "float8_e8m0fnu", "float4_e2m1fn"))
COMPLEX = (np.dtype("complex64"), np.dtype("complex128"))
INT = SINT + UINT
REAL = INT + FLOAT
NUMERIC = REAL + COMPLEX
ALL = BOOL + INT + SUBBYTE + FLOAT + FP8 + COMPLEX
# the sub-byte integers by signedness, and every integer / real type JAX has
SUBBYTE_S, SUBBYTE_U = SUBBYTE[:2], SUBBYTE[2:]
ANY_INT = INT + SUBBYTE
ANY_FLOAT = FLOAT + FP8

# the fnuz floats: one NaN, the bit pattern of -0
FNUZ = tuple(d for d in FP8 if d.name.endswith("fnuz"))
SMALL_FLOAT = FLOAT[:2] + FP8

# tolerance classes (compare.py): exact, ulp (a few ulps: arithmetic, sqrt), trans (ulp-based
# with more ulps: transcendental functions), accum (sums of products: relative to the output's
# scale and the number of terms)
EXACT, ULP, TRANS, ACCUM = "exact", "ulp", "trans", "accum"


@dataclass
class Program:
    """One generated program: `fn(*args)` under jax.jit is the oracle."""

    family: str
    fn: Callable[..., Any]
    args: list[np.ndarray]
    tol: str
    desc: str
    tags: frozenset[str] = field(default_factory=frozenset)


def shape(rng: np.random.Generator, rank: int | None = None,
          empty: float = 0.08) -> tuple[int, ...]:
    r = int(rng.integers(0, 4)) if rank is None else rank
    return tuple(0 if rng.random() < empty else int(rng.integers(1, 6)) for _ in range(r))


def _float_specials(dt: np.dtype) -> list[float]:
    fi = ml_dtypes.finfo(dt)
    out = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1.0, -1.0,
           float(fi.max), float(fi.min), float(fi.tiny), -float(fi.tiny)]
    sub = float(getattr(fi, "smallest_subnormal", 0.0) or 0.0)
    if sub:
        out += [sub, -sub, sub * 3]
    return out


def values(rng: np.random.Generator, shp: Sequence[int], dt: np.dtype,
           special: float = 0.15) -> np.ndarray:
    """Random values of `dt` with the type's special values mixed in."""
    n = int(np.prod(shp, dtype=np.int64))
    if dt == np.dtype(bool):
        return rng.random(n).reshape(shp) < 0.5
    if dt.kind == "c":
        part = np.dtype("float32") if dt.itemsize == 8 else np.dtype("float64")
        out = np.empty(tuple(shp), dtype=dt)
        out.real, out.imag = values(rng, shp, part, special), values(rng, shp, part, special)
        return out
    if dt.kind in "iu" or dt in SUBBYTE:
        info = ml_dtypes.iinfo(dt)
        lo, hi = int(info.min), int(info.max)
        small = rng.integers(max(lo, -8), min(hi, 8) + 1, n)
        full = rng.integers(lo, hi, n, endpoint=True, dtype=np.int64 if hi < 2**63 else np.uint64)
        edge = rng.choice(np.array(sorted({lo, hi, 0, min(hi, 1), max(lo, -1)}), dtype=object), n)
        pick_ = rng.random(n)
        out = np.where(pick_ < 0.6, small.astype(object), full.astype(object))
        out = np.where(pick_ > 1 - special, edge, out)
        return np.array([int(v) for v in out], dtype=object).astype(dt).reshape(shp)
    base = rng.standard_normal(n) * np.exp2(rng.integers(-4, 5, n))
    specials = np.array(_float_specials(dt))
    base = np.where(rng.random(n) < special, rng.choice(specials, n), base)
    return base.astype(dt).reshape(shp)


def pick(rng: np.random.Generator, seq: Sequence[Any]) -> Any:
    return seq[int(rng.integers(0, len(seq)))]


def inexact(dt: np.dtype) -> bool:
    """A floating-point or complex type (bf16 and the 8-/4-bit floats are numpy kind 'V')."""
    return dt.kind in "fc" or dt in ANY_FLOAT


def has_inf(dt: np.dtype) -> bool:
    """A float type with infinities (not the fn / fnuz / e8m0 / f4 formats)."""
    return bool(np.isinf(np.asarray(np.inf).astype(dt).astype(np.float64)))


def bits(dt: np.dtype) -> int:
    if dt in SUBBYTE:
        return int(ml_dtypes.iinfo(dt).bits)
    if dt in FP8:
        return int(ml_dtypes.finfo(dt).bits)
    return dt.itemsize * 8


def has_subnormal(x: np.ndarray) -> bool:
    a = np.abs(x.astype(np.float64))
    return bool(((a > 0) & (a < float(ml_dtypes.finfo(x.dtype).tiny))).any())


def max_identity(dt: np.dtype) -> np.ndarray:
    """The identity of max in `dt` as JAX picks it (-inf, or the lowest finite value of a float
    type without infinities; the minimum of an integer type; False)."""
    if dt == np.dtype(bool):
        return np.asarray(False)
    if dt.kind in "iu" or dt in SUBBYTE:
        return np.asarray(ml_dtypes.iinfo(dt).min).astype(dt)
    inf = np.asarray(-np.inf).astype(dt)
    return inf if np.isinf(inf.astype(np.float64)) else np.asarray(ml_dtypes.finfo(dt).min, dt)


def min_identity(dt: np.dtype) -> np.ndarray:
    """The identity of min in `dt` (+inf, the largest finite value, the maximum, True)."""
    if dt == np.dtype(bool):
        return np.asarray(True)
    if dt.kind in "iu" or dt in SUBBYTE:
        return np.asarray(ml_dtypes.iinfo(dt).max).astype(dt)
    inf = np.asarray(np.inf).astype(dt)
    return inf if np.isinf(inf.astype(np.float64)) else np.asarray(ml_dtypes.finfo(dt).max, dt)


def one(dt: np.dtype) -> np.ndarray:
    return np.asarray(True if dt == np.dtype(bool) else 1).astype(dt)


def step(rng: np.random.Generator, dt: np.dtype) -> tuple[str, Callable[[Any], Any]]:
    """A random cheap update of a value of `dt` (name, function): what a loop body or a branch
    does to its carried state. Integers wrap, floats may overflow to inf or NaN."""
    if dt == np.dtype(bool):
        return pick(rng, [("not", lax.bitwise_not), ("keep", lambda a: a)])
    c = one(dt)
    if dt.kind in "iu" or dt in SUBBYTE:
        return pick(rng, [("+1", lambda a: a + c), ("*3", lambda a: a * (c + c + c)),
                          ("not", lax.bitwise_not), ("neg", lax.neg)])
    if dt == np.dtype(ml_dtypes.float8_e8m0fnu):  # unsigned powers of two: no sign to flip
        return pick(rng, [("*2", lambda a: a + a), ("max", lambda a: lax.max(a, c))])
    return pick(rng, [("*2+1", lambda a: a * (c + c) + c), ("neg", lax.neg),
                      ("sq", lambda a: a * a), ("-1", lambda a: a - c)])
