"""The fuzzer's program generators: one random JAX program per call, over the `lax` primitives.

`generate(rng)` picks an op family (`FAMILIES`, weighted), an element type the family takes and
random parameters, and returns a `Program`: a function of arrays, its argument arrays and the
tolerance class its outputs are compared under (`compare.py`). Conditions enforced:

* shapes have rank 0-3 and dimensions 0-5 (empty dimensions included);
* float inputs carry NaN, +-inf, -0.0, subnormals and values near the type's limits; integer
  inputs carry the type's minimum, maximum, 0 and -1 (`values`);
* the parameters XLA defines but programs rarely use are drawn on purpose: negative padding,
  interior padding, reversed axes, strided slices, out-of-range and negative indices in dynamic
  slices, gathers and scatters (every `mode`), mixed operand types with
  `preferred_element_type` in dots, every element type pair in converts and bitcasts;
* a program is a pure function of its arguments (no PRNG state, no host callbacks).

A program JAX itself rejects at trace time (an element type an op does not take) is not an error:
`runner.py` counts it as rejected and draws the next one. The generator never imports hlofuse's
core and the core never imports it (JAX lives under `frontends/`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
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


# ----- values -------------------------------------------------------------------------------


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
        pick = rng.random(n)
        out = np.where(pick < 0.6, small.astype(object), full.astype(object))
        out = np.where(pick > 1 - special, edge, out)
        return np.array([int(v) for v in out], dtype=object).astype(dt).reshape(shp)
    base = rng.standard_normal(n) * np.exp2(rng.integers(-4, 5, n))
    specials = np.array(_float_specials(dt))
    base = np.where(rng.random(n) < special, rng.choice(specials, n), base)
    return base.astype(dt).reshape(shp)


def pick(rng: np.random.Generator, seq: Sequence[Any]) -> Any:
    return seq[int(rng.integers(0, len(seq)))]


# ----- families -----------------------------------------------------------------------------

_UNARY: dict[str, tuple[Callable[..., Any], tuple[np.dtype, ...], str]] = {
    "neg": (lax.neg, SINT + UINT + FLOAT + COMPLEX + FP8, EXACT),
    "abs": (lax.abs, SINT + FLOAT + COMPLEX + FP8, ULP),
    "sign": (lax.sign, SINT + UINT + FLOAT + COMPLEX, ULP),
    "floor": (lax.floor, FLOAT, EXACT), "ceil": (lax.ceil, FLOAT, EXACT),
    "round_afz": (lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), FLOAT, EXACT),
    "round_even": (lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), FLOAT, EXACT),
    "is_finite": (lax.is_finite, FLOAT + FP8, EXACT),
    "not": (lax.bitwise_not, BOOL + INT, EXACT),
    "clz": (lax.clz, INT, EXACT), "popcnt": (lax.population_count, INT, EXACT),
    "real": (lax.real, COMPLEX, EXACT), "imag": (lax.imag, COMPLEX, EXACT),
    "conj": (lax.conj, COMPLEX, EXACT),
    "sqrt": (lax.sqrt, FLOAT + COMPLEX, ULP), "rsqrt": (lax.rsqrt, FLOAT + COMPLEX, ULP),
    "cbrt": (lax.cbrt, FLOAT, ULP),
    "exp": (lax.exp, FLOAT + COMPLEX, TRANS), "expm1": (lax.expm1, FLOAT + COMPLEX, TRANS),
    "exp2": (lax.exp2, FLOAT, TRANS),
    "log": (lax.log, FLOAT + COMPLEX, TRANS), "log1p": (lax.log1p, FLOAT + COMPLEX, TRANS),
    "sin": (lax.sin, FLOAT + COMPLEX, TRANS), "cos": (lax.cos, FLOAT + COMPLEX, TRANS),
    "tan": (lax.tan, FLOAT + COMPLEX, TRANS), "tanh": (lax.tanh, FLOAT + COMPLEX, TRANS),
    "logistic": (lax.logistic, FLOAT + COMPLEX, TRANS),
    "atan": (lax.atan, FLOAT, TRANS), "asin": (lax.asin, FLOAT, TRANS),
    "acos": (lax.acos, FLOAT, TRANS), "sinh": (lax.sinh, FLOAT, TRANS),
    "cosh": (lax.cosh, FLOAT, TRANS), "asinh": (lax.asinh, FLOAT, TRANS),
    "acosh": (lax.acosh, FLOAT, TRANS), "atanh": (lax.atanh, FLOAT, TRANS),
    "erf": (lax.erf, FLOAT, TRANS), "erf_inv": (lax.erf_inv, FLOAT, TRANS),
    "square": (lax.square, REAL + COMPLEX, ULP),
}

_BINARY: dict[str, tuple[Callable[..., Any], tuple[np.dtype, ...], str]] = {
    "add": (lax.add, NUMERIC + FP8, ULP), "sub": (lax.sub, NUMERIC, ULP),
    "mul": (lax.mul, NUMERIC + FP8, ULP), "div": (lax.div, NUMERIC, ULP),
    "rem": (lax.rem, REAL, ULP), "max": (lax.max, BOOL + REAL + FP8, EXACT),
    "min": (lax.min, BOOL + REAL, EXACT), "pow": (lax.pow, FLOAT + COMPLEX, TRANS),
    "atan2": (lax.atan2, FLOAT, TRANS), "nextafter": (lax.nextafter, FLOAT, EXACT),
    "and": (lax.bitwise_and, BOOL + INT, EXACT), "or": (lax.bitwise_or, BOOL + INT, EXACT),
    "xor": (lax.bitwise_xor, BOOL + INT, EXACT),
    "shl": (lax.shift_left, INT, EXACT), "shr_l": (lax.shift_right_logical, INT, EXACT),
    "shr_a": (lax.shift_right_arithmetic, INT, EXACT),
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
    tags = frozenset()
    if name == "pow" and dt.kind == "f" and any(_has_subnormal(a) for a in args):
        tags = frozenset({"pow-subnormal"})
    return Program("binary", fn, args, tol, f"{name}[{dt.name}]{list(shp)}", tags)


def _has_subnormal(x: np.ndarray) -> bool:
    a = np.abs(x.astype(np.float64))
    return bool(((a > 0) & (a < float(ml_dtypes.finfo(x.dtype).tiny))).any())


def _compare(rng: np.random.Generator) -> Program:
    name = pick(rng, sorted(_COMPARE))
    dt, shp = pick(rng, BOOL + NUMERIC + FP8), shape(rng)
    return Program("compare", _COMPARE[name], [values(rng, shp, dt), values(rng, shp, dt)],
                   EXACT, f"compare-{name}[{dt.name}]{list(shp)}")


def _select_clamp(rng: np.random.Generator) -> Program:
    dt, shp = pick(rng, BOOL + REAL + COMPLEX), shape(rng)
    if rng.random() < 0.5 or dt.kind in "bc":
        p = values(rng, shp, np.dtype(bool))
        return Program("select", lax.select, [p, values(rng, shp, dt), values(rng, shp, dt)],
                       EXACT, f"select[{dt.name}]{list(shp)}")
    lo = values(rng, () if rng.random() < 0.5 else shp, dt)
    return Program("clamp", lax.clamp, [lo, values(rng, shp, dt), values(rng, lo.shape, dt)],
                   EXACT, f"clamp[{dt.name}]{list(shp)}")


def _convert(rng: np.random.Generator) -> Program:
    src, dst = pick(rng, ALL), pick(rng, ALL)
    x = values(rng, shape(rng), src)
    tags = frozenset({"subbyte-convert"}) if src in SUBBYTE or dst in SUBBYTE else frozenset()
    return Program("convert", lambda a: lax.convert_element_type(a, dst), [x], EXACT,
                   f"convert[{src.name}->{dst.name}]{list(x.shape)}", tags)


def _bitcast(rng: np.random.Generator) -> Program:
    src = pick(rng, ALL)
    nbits = _bits(src)
    same = [d for d in ALL if d != np.dtype(bool) and _bits(d) == nbits]
    wider = [d for d in ALL if d != np.dtype(bool) and _bits(d) in (nbits * 2, nbits * 4)
             and _bits(d) >= 8]
    narrow = [d for d in ALL if d != np.dtype(bool) and _bits(d) * 2 == nbits and _bits(d) >= 8]
    dst = pick(rng, same + wider + narrow) if src != np.dtype(bool) else np.dtype("int8")
    shp = shape(rng, int(rng.integers(0, 3)))
    if _bits(dst) > nbits:
        shp = (*shp, _bits(dst) // nbits)
    x = values(rng, shp, src)
    tags = frozenset({"subbyte-convert"}) if src in SUBBYTE or dst in SUBBYTE else frozenset()
    return Program("bitcast", lambda a: lax.bitcast_convert_type(a, dst), [x], EXACT,
                   f"bitcast[{src.name}->{dst.name}]{list(shp)}", tags)


def _bits(dt: np.dtype) -> int:
    if dt in SUBBYTE:
        return int(ml_dtypes.iinfo(dt).bits)
    if dt in FP8:
        return int(ml_dtypes.finfo(dt).bits)
    return dt.itemsize * 8


def _reduce_precision(rng: np.random.Generator) -> Program:
    dt = pick(rng, FLOAT)
    e, m = int(rng.integers(1, 9)), int(rng.integers(0, 24))
    x = values(rng, shape(rng), dt)
    return Program("reduce_precision", lambda a: lax.reduce_precision(a, e, m), [x], EXACT,
                   f"reduce_precision[{dt.name},e{e}m{m}]{list(x.shape)}")


def _shaping(rng: np.random.Generator) -> Program:
    dt = pick(rng, BOOL + NUMERIC + FP8)
    kind = pick(rng, ("broadcast", "reshape", "transpose", "rev", "slice", "pad",
                      "concatenate", "iota"))
    shp = shape(rng, int(rng.integers(1, 4)))
    x = values(rng, shp, dt)
    r = len(shp)
    if kind == "broadcast":
        out = (int(rng.integers(1, 4)), *shp)
        fn: Callable[..., Any] = lambda a: lax.broadcast_in_dim(  # noqa: E731
            a, out, tuple(range(1, r + 1)))
    elif kind == "reshape":
        fn = lambda a: lax.reshape(a, (int(np.prod(shp)),))  # noqa: E731
    elif kind == "transpose":
        perm = tuple(int(p) for p in rng.permutation(r))
        fn = lambda a: lax.transpose(a, perm)  # noqa: E731
    elif kind == "rev":
        dims = tuple(d for d in range(r) if rng.random() < 0.6)
        fn = lambda a: lax.rev(a, dims)  # noqa: E731
    elif kind == "slice":
        st = [int(rng.integers(0, d + 1)) for d in shp]
        lim = [int(rng.integers(s, d + 1)) for s, d in zip(st, shp, strict=True)]
        strides = [int(rng.integers(1, 4)) for _ in shp]
        fn = lambda a: lax.slice(a, st, lim, strides)  # noqa: E731
        if rng.random() < 0.4:  # a negative stride: jnp's reversed slicing (rev + slice)
            neg = (slice(None, None, -int(rng.integers(1, 3))),) * r
            fn = lambda a: a[neg]  # noqa: E731
    elif kind == "pad":
        cfg = [(int(rng.integers(-2, 3)), int(rng.integers(-2, 3)), int(rng.integers(0, 3)))
               for _ in shp]
        cfg = [(lo, hi, it) if d + lo + hi + max(d - 1, 0) * it >= 0 else (0, 0, it)
               for (lo, hi, it), d in zip(cfg, shp, strict=True)]
        pv = values(rng, (), dt)
        return Program("pad", lambda a, p: lax.pad(a, p, cfg), [x, pv], EXACT,
                       f"pad[{dt.name}]{list(shp)}{cfg}")
    elif kind == "concatenate":
        y = values(rng, (*shp[:-1], int(rng.integers(0, 4))), dt)
        return Program("concatenate", lambda a, b: lax.concatenate([a, b], r - 1), [x, y],
                       EXACT, f"concatenate[{dt.name}]{list(shp)}+{list(y.shape)}")
    else:
        it = pick(rng, INT + FLOAT)
        return Program("iota", lambda a: (lax.broadcasted_iota(it, shp, r - 1), a), [x], EXACT,
                       f"iota[{it.name}]{list(shp)}")
    return Program(kind, fn, [x], EXACT, f"{kind}[{dt.name}]{list(shp)}")


def _indexing(rng: np.random.Generator, no_u64_index: bool) -> Program:
    dt = pick(rng, BOOL + NUMERIC)
    ix = pick(rng, SINT + (UINT[:3] if no_u64_index else UINT))
    shp = shape(rng, int(rng.integers(1, 4)), empty=0.05)
    x = values(rng, shp, dt)
    kind = pick(rng, ("dynamic_slice", "dynamic_update_slice", "gather", "scatter"))
    tags = frozenset({"u64-index"}) if ix == np.dtype("uint64") else frozenset()
    if kind in ("dynamic_slice", "dynamic_update_slice"):
        sizes = [int(rng.integers(0, d + 1)) for d in shp]
        lo = -6 if ix.kind == "i" else 0
        starts = [np.asarray(rng.integers(lo, 7), dtype=ix) for _ in shp]
        if kind == "dynamic_slice":
            return Program(kind, lambda a, *s: lax.dynamic_slice(a, s, sizes), [x, *starts],
                           EXACT, f"{kind}[{dt.name},{ix.name}]{list(shp)}{sizes}", tags)
        upd = values(rng, sizes, dt)
        return Program(kind, lambda a, u, *s: lax.dynamic_update_slice(a, u, s),
                       [x, upd, *starts], EXACT, f"{kind}[{dt.name},{ix.name}]{list(shp)}", tags)
    n = int(rng.integers(0, 6))
    lo = -2 * shp[0] - 2 if ix.kind == "i" else 0
    idx = rng.integers(lo, 2 * shp[0] + 3, n).astype(ix)
    if ix == np.dtype("uint64") and n and rng.random() < 0.3:
        idx[0] = np.uint64(2**63 + 5)
    mode = pick(rng, ("clip", "fill") if kind == "gather" else ("clip", "drop"))
    if kind == "gather":
        return Program(kind, lambda a, i: jnp.take(a, i, axis=0, mode=mode), [x, idx], EXACT,
                       f"gather[{dt.name},{ix.name},{mode}]{list(shp)}", tags)
    comb = pick(rng, ("set", "add", "mul", "min", "max") if dt.kind != "c" else ("set", "add"))
    if dt == np.dtype(bool):
        comb = "set"
    upd = values(rng, (n, *shp[1:]), dt)
    if dt.kind == "c" and comb == "add":
        tags = tags | {"complex-scatter-add"}
    tol = ULP if comb in ("add", "mul") and dt.kind in "fc" else EXACT
    return Program(kind, lambda a, i, u: getattr(a.at[i], comb)(u, mode=mode), [x, idx, upd],
                   tol, f"scatter-{comb}[{dt.name},{ix.name},{mode}]{list(shp)}", tags)


def _reduce(rng: np.random.Generator) -> Program:
    dt = pick(rng, BOOL + NUMERIC)
    shp = shape(rng, int(rng.integers(1, 4)))
    x = values(rng, shp, dt, special=0.05)
    dims = tuple(d for d in range(len(shp)) if rng.random() < 0.6) or (0,)
    kind = pick(rng, ("sum", "prod", "max", "min", "and", "or", "argmax", "window", "cumsum",
                      "cummax"))
    if dt == np.dtype(bool):
        kind = pick(rng, ("and", "or", "max", "window"))
    fns = {"sum": lambda a: lax.reduce_sum_p.bind(a, axes=dims, out_sharding=None),
           "prod": lambda a: jnp.prod(a, axis=dims), "max": lambda a: jnp.max(a, axis=dims),
           "min": lambda a: jnp.min(a, axis=dims), "and": lambda a: jnp.all(a, axis=dims),
           "or": lambda a: jnp.any(a, axis=dims),
           "argmax": lambda a: jnp.argmax(a, axis=dims[0]),
           "cumsum": lambda a: jnp.cumsum(a, axis=dims[0]),
           "cummax": lambda a: lax.cummax(a, axis=dims[0])}
    tol = ACCUM if kind in ("sum", "prod", "cumsum") else EXACT
    if kind == "sum":
        fns["sum"] = lambda a: jnp.sum(a, axis=dims)
    if kind == "window":
        win = tuple(int(rng.integers(1, 3)) for _ in shp)
        strides = tuple(int(rng.integers(1, 3)) for _ in shp)
        pads = tuple((int(rng.integers(0, 2)), int(rng.integers(0, 2))) for _ in shp)
        op, init = ((lax.max, -np.inf) if dt.kind == "f" else (lax.add, 0)) \
            if dt != np.dtype(bool) else (lax.bitwise_or, False)
        if dt.kind == "c":
            op, init = lax.add, 0
        tol = ACCUM if op is lax.add and dt.kind in "fc" else EXACT
        init_v = np.asarray(init).astype(dt)
        return Program("reduce_window", lambda a: lax.reduce_window(a, init_v, op, win, strides,
                                                                    pads),
                       [x], tol, f"reduce_window-{op.__name__}[{dt.name}]{list(shp)}{win}")
    # complex min/max reduce through a lexicographic comparator that NaN makes order-dependent:
    # XLA leaves the reduction order unspecified, so such results may differ legitimately
    tags = frozenset({"complex-minmax"}) if dt.kind == "c" and kind in (
        "max", "min", "argmax", "cummax") else frozenset()
    return Program("reduce", fns[kind], [x], tol, f"reduce-{kind}[{dt.name}]{list(shp)}{dims}",
                   tags)


def _sort(rng: np.random.Generator) -> Program:
    dt = pick(rng, BOOL + REAL)
    shp = shape(rng, int(rng.integers(1, 3)))
    x, y = values(rng, shp, dt), values(rng, shp, pick(rng, REAL))
    dim = int(rng.integers(0, len(shp)))
    stable = bool(rng.random() < 0.5)
    return Program("sort", lambda a, b: lax.sort((a, b), dimension=dim, num_keys=1,
                                                 is_stable=stable),
                   [x, y], EXACT, f"sort[{dt.name},{y.dtype.name}]{list(shp)}d{dim}")


def _dot(rng: np.random.Generator, no_complex_mixed: bool) -> Program:
    a_t = pick(rng, INT + FLOAT + COMPLEX)
    b_t = a_t if rng.random() < 0.5 else pick(rng, INT + FLOAT + COMPLEX)
    if no_complex_mixed and (a_t.kind == "c" or b_t.kind == "c") and a_t != b_t:
        b_t = a_t
    m, k, n, b = (int(rng.integers(0 if rng.random() < 0.05 else 1, 5)) for _ in range(4))
    form = pick(rng, ("vv", "mv", "mm", "batch"))
    shapes = {"vv": ((k,), (k,), (((0,), (0,)), ((), ()))),
              "mv": ((m, k), (k,), (((1,), (0,)), ((), ()))),
              "mm": ((m, k), (k, n), (((1,), (0,)), ((), ()))),
              "batch": ((b, m, k), (b, k, n), (((2,), (1,)), ((0,), (0,))))}
    sa, sb, dn = shapes[form]
    x, y = values(rng, sa, a_t, 0.02), values(rng, sb, b_t, 0.02)
    pref = None if rng.random() < 0.6 else pick(rng, INT + FLOAT + COMPLEX)
    tags = frozenset({"complex-dot"}) if "c" in (a_t.kind, b_t.kind) else frozenset()
    if pref is not None and pref.kind in "iu" and "f" in (a_t.kind, b_t.kind):
        tags = tags | {"float-dot-int-result"}
    return Program("dot", lambda p, q: lax.dot_general(p, q, dn, preferred_element_type=pref),
                   [x, y], ACCUM,
                   f"dot-{form}[{a_t.name}x{b_t.name}->{getattr(pref, 'name', None)}]", tags)


def _conv(rng: np.random.Generator) -> Program:
    dt = pick(rng, FLOAT + COMPLEX + SINT[:3])
    g = int(rng.integers(1, 3))
    n, cin, cout = 1 + int(rng.integers(0, 2)), g * int(rng.integers(1, 3)), g
    w = int(rng.integers(1, 7))
    kw = int(rng.integers(1, 4))
    x, k = values(rng, (n, cin, w), dt, 0.02), values(rng, (cout, cin // g, kw), dt, 0.02)
    stride, pad = int(rng.integers(1, 3)), (int(rng.integers(-1, 3)), int(rng.integers(-1, 3)))
    lhs_d, rhs_d = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    if (w - 1) * lhs_d + 1 + sum(pad) < (kw - 1) * rhs_d + 1:
        pad = (kw * rhs_d, kw * rhs_d)
    return Program("conv", lambda a, b: lax.conv_general_dilated(
        a, b, (stride,), [pad], (lhs_d,), (rhs_d,), feature_group_count=g), [x, k], ACCUM,
        f"conv[{dt.name},g{g}]{list(x.shape)}*{list(k.shape)}s{stride}p{pad}d{lhs_d},{rhs_d}")


def _fft(rng: np.random.Generator) -> Program:
    dt = pick(rng, COMPLEX + FLOAT[2:])
    kind = pick(rng, ("FFT", "IFFT") if dt.kind == "c" else ("RFFT",))
    shp = (*shape(rng, int(rng.integers(0, 2)), empty=0), int(rng.integers(1, 9)))
    x = values(rng, shp, dt, 0.0)
    ln = (shp[-1],)
    return Program("fft", lambda a: lax.fft(a, kind, ln), [x], ACCUM,
                   f"fft-{kind}[{dt.name}]{list(shp)}")


def _control(rng: np.random.Generator) -> Program:
    dt = pick(rng, SINT + FLOAT)
    x = values(rng, shape(rng), dt, 0.05)
    n = int(rng.integers(0, 4))
    if rng.random() < 0.5:
        return Program("while", lambda a: lax.fori_loop(0, n, lambda i, c: c * 2 + 1, a), [x],
                       ULP, f"while[{dt.name}]x{n}")
    p = np.asarray(rng.integers(-1, 4), dtype=np.int32)
    return Program("conditional", lambda i, a: lax.switch(i, [lambda v: v + 1, lambda v: v * 3,
                                                              lambda v: -v], a),
                   [p, x], ULP, f"conditional[{dt.name}]")


def _rng_bits(rng: np.random.Generator) -> Program:
    key = rng.integers(0, 2**32, 4, dtype=np.uint64).astype(np.uint32)
    out = pick(rng, UINT)
    shp = shape(rng, int(rng.integers(1, 3)), empty=0)
    alg = pick(rng, (lax.RandomAlgorithm.RNG_THREE_FRY, lax.RandomAlgorithm.RNG_PHILOX))
    return Program("rng_bit_generator", lambda k: lax.rng_bit_generator(k, shp, out, alg), [key],
                   EXACT, f"rng_bit_generator[{out.name},{alg.name}]{list(shp)}")


# family -> (weight, generator); generators taking `opts` get the test sample's exclusions
FAMILIES: dict[str, tuple[float, Callable[..., Program]]] = {
    "unary": (6, lambda r, o: _unary(r)), "binary": (5, lambda r, o: _binary(r)),
    "compare": (2, lambda r, o: _compare(r)), "select": (1.5, lambda r, o: _select_clamp(r)),
    "convert": (5, lambda r, o: _convert(r)), "bitcast": (2, lambda r, o: _bitcast(r)),
    "reduce_precision": (0.5, lambda r, o: _reduce_precision(r)),
    "shaping": (4, lambda r, o: _shaping(r)),
    "indexing": (4, lambda r, o: _indexing(r, "u64-index" in o)),
    "reduce": (3, lambda r, o: _reduce(r)), "sort": (1, lambda r, o: _sort(r)),
    "dot": (3, lambda r, o: _dot(r, "complex-dot" in o)), "conv": (1.5, lambda r, o: _conv(r)),
    "fft": (1, lambda r, o: _fft(r)), "control": (1, lambda r, o: _control(r)),
    "rng": (0.5, lambda r, o: _rng_bits(r)),
}


def generate(rng: np.random.Generator, exclude: frozenset[str] = frozenset()) -> Program:
    """One random program; programs tagged with a class in `exclude` are redrawn."""
    names = sorted(FAMILIES)
    w = np.array([FAMILIES[n][0] for n in names], dtype=np.float64)
    while True:
        prog = FAMILIES[names[int(rng.choice(len(names), p=w / w.sum()))]][1](rng, exclude)
        if not prog.tags & exclude:
            return prog


def jax_x64() -> Any:
    """The context programs are traced and run in (64-bit types on)."""
    return jax.enable_x64(True)
