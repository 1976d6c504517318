"""The fuzzer's array families: shaping (broadcast, reshape, transpose, rev, slice, pad,
concatenate, iota), indexing (dynamic slices, gathers, scatters), sort and top_k, dot_general,
convolution and fft (see `ops.py` for the registry).

Conditions enforced:

* shaping and indexing ops take every element type JAX has (bool, sub-byte integers, the 8- and
  4-bit floats, complex), pads negative and interior padding, slices strides and negative
  strides (jnp's reversed slicing), concatenations two or three operands on any axis;
* dynamic slices and updates start out of range and negative (XLA clamps the start); gathers
  and scatters index out of range and negatively in every `mode` (clip, fill / drop,
  promise_in_bounds: XLA's own clamping and skipping), on any axis and with two indexed axes;
* sort takes one to three operands of any types with 1..n keys, stable or not; top_k every
  type XLA's CPU runs it on (not complex: lax rejects it; not sub-byte or f4: XLA's CPU
  refuses custom element sizes);
* dots mix operand types and `preferred_element_type`; convolutions are grouped, strided,
  padded (negatively too) and dilated on both sides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from jax import lax

from hlofuse.frontends.fuzz.base import (
    ACCUM,
    ALL,
    ANY_FLOAT,
    ANY_INT,
    BOOL,
    COMPLEX,
    EXACT,
    FLOAT,
    FNUZ,
    FP8,
    INT,
    REAL,
    SINT,
    SMALL_FLOAT,
    SUBBYTE,
    UINT,
    ULP,
    Program,
    inexact,
    pick,
    shape,
    values,
)

__all__ = ["conv", "dot", "fft", "indexing", "shaping", "sort", "topk"]

_TWO_BIT = (np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2))


def shaping(rng: np.random.Generator) -> Program:
    dt = pick(rng, ALL)
    kind = pick(rng, ("broadcast", "reshape", "transpose", "rev", "slice", "pad",
                      "concatenate", "iota"))
    shp = shape(rng, int(rng.integers(1, 4)))
    x = values(rng, shp, dt)
    r = len(shp)
    if kind == "broadcast":
        if rng.random() < 0.3:  # a scalar to any shape, or a size-1 axis stretched
            x = values(rng, (), dt)
            return Program(kind, lambda a: lax.broadcast(a, shp), [x], EXACT,
                           f"{kind}[{dt.name}](){list(shp)}")
        out = (int(rng.integers(1, 4)), *shp)
        fn: Callable[..., Any] = lambda a: lax.broadcast_in_dim(  # noqa: E731
            a, out, tuple(range(1, r + 1)))
    elif kind == "reshape":
        fn = lambda a: lax.reshape(a, (int(np.prod(shp)),))  # noqa: E731
    elif kind == "transpose":  # (rank >= 2 and a permutation that moves something)
        shp = shape(rng, int(rng.integers(2, 4)), empty=0.02)
        x, r = values(rng, shp, dt), len(shp)
        perm = tuple(int(p) for p in rng.permutation(r))
        perm = perm if perm != tuple(range(r)) else tuple(reversed(perm))
        fn = lambda a: lax.transpose(a, perm)  # noqa: E731
    elif kind == "rev":
        dims = tuple(d for d in range(r) if rng.random() < 0.6) or (r - 1,)
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
        if dt in _TWO_BIT:  # XLA's CPU aborts on it (ir_array.cc: bit_offset CHECK): no oracle
            dt = np.dtype(ml_dtypes.int4 if dt == _TWO_BIT[0] else ml_dtypes.uint4)
            x = values(rng, shp, dt)
        ax = int(rng.integers(0, r))
        more = [values(rng, (*shp[:ax], int(rng.integers(0, 4)), *shp[ax + 1:]), dt)
                for _ in range(int(rng.integers(1, 3)))]
        return Program("concatenate", lambda *a: lax.concatenate(a, ax), [x, *more], EXACT,
                       f"concatenate[{dt.name}]{list(shp)}+{[list(m.shape) for m in more]}@{ax}")
    else:
        it = pick(rng, ANY_INT + ANY_FLOAT + COMPLEX)
        dim = int(rng.integers(0, r))
        return Program("iota", lambda a: (lax.broadcasted_iota(it, shp, dim), a), [x], EXACT,
                       f"iota[{it.name}]{list(shp)}d{dim}")
    return Program(kind, fn, [x], EXACT, f"{kind}[{dt.name}]{list(shp)}")


def _dynamic(rng: np.random.Generator, kind: str, dt: np.dtype, ix: np.dtype,
             x: np.ndarray, tags: frozenset[str]) -> Program:
    shp = x.shape
    sizes = [int(rng.integers(0, d + 1)) for d in shp]
    lo = -6 if ix.kind == "i" else 0
    starts = [np.asarray(rng.integers(lo, 7), dtype=ix) for _ in shp]
    if kind == "dynamic_slice":
        return Program(kind, lambda a, *s: lax.dynamic_slice(a, s, sizes), [x, *starts],
                       EXACT, f"{kind}[{dt.name},{ix.name}]{list(shp)}{sizes}", tags)
    upd = values(rng, sizes, dt)
    return Program(kind, lambda a, u, *s: lax.dynamic_update_slice(a, u, s),
                   [x, upd, *starts], EXACT, f"{kind}[{dt.name},{ix.name}]{list(shp)}", tags)


def indexing(rng: np.random.Generator, no_u64_index: bool) -> Program:
    dt = pick(rng, ALL)
    ix = pick(rng, SINT + (UINT[:3] if no_u64_index else UINT))
    shp = shape(rng, int(rng.integers(1, 4)), empty=0.05)
    x = values(rng, shp, dt)
    kind = pick(rng, ("dynamic_slice", "dynamic_update_slice", "gather", "scatter"))
    tags = frozenset({"u64-index"}) if ix == np.dtype("uint64") else frozenset()
    if kind in ("dynamic_slice", "dynamic_update_slice"):
        return _dynamic(rng, kind, dt, ix, x, tags)
    n = int(rng.integers(0, 6))
    # the indexed axes: one (any axis) or, on rank >= 2, the first and the last
    axes = (int(rng.integers(0, len(shp))),) if len(shp) < 2 or rng.random() < 0.7 else (
        0, len(shp) - 1)
    idx = []
    for ax in axes:
        lo = -2 * shp[ax] - 2 if ix.kind == "i" else 0
        i = rng.integers(lo, 2 * shp[ax] + 3, n).astype(ix)
        if ix == np.dtype("uint64") and n and rng.random() < 0.3:
            i[0] = np.uint64(2**63 + 5)
        idx.append(i)
    key = tuple(slice(None) if d not in axes else None for d in range(len(shp)))

    def where(*i: Any) -> tuple[Any, ...]:
        it = iter(i)
        return tuple(next(it) if k is None else k for k in key)

    modes = ("clip", "fill", "promise_in_bounds") if kind == "gather" else (
        "clip", "drop", "promise_in_bounds")
    mode = pick(rng, modes)
    desc = f"[{dt.name},{ix.name},{mode}]{list(shp)}@{list(axes)}"
    if kind == "gather":
        return Program(kind, lambda a, *i: a.at[where(*i)].get(mode=mode), [x, *idx], EXACT,
                       f"gather{desc}", tags)
    comb = pick(rng, ("set", "add", "mul", "min", "max") if dt.kind != "c" else ("set", "add"))
    if dt == np.dtype(bool):
        comb = "set"
    # the update's shape: the gathered shape (the index dims where the first indexed axis is,
    # as numpy advanced indexing places them; in front when the indexed axes are apart)
    rest = [d for k, d in enumerate(shp) if k not in axes]
    ushape = (n, *rest) if len(axes) > 1 or axes[0] == 0 else (
        *shp[:axes[0]], n, *shp[axes[0] + 1:])
    upd = values(rng, ushape, dt)
    if dt.kind == "c" and comb == "add":
        tags = tags | {"complex-scatter-add"}
    tol = ULP if comb in ("add", "mul") and inexact(dt) else EXACT
    return Program(kind, lambda a, u, *i: getattr(a.at[where(*i)], comb)(u, mode=mode),
                   [x, upd, *idx], tol, f"scatter-{comb}{desc}", tags)


# element types whose dots XLA's CPU runs only in their own type (no preferred_element_type:
# "custom element sizes on non-sub-byte types")
_OWN_TYPE_DOT = (*SUBBYTE, np.dtype(ml_dtypes.float4_e2m1fn))


def sort(rng: np.random.Generator) -> Program:
    """lax.sort of 1-3 operands of any types (the first a key), the first 1..n keys."""
    shp = shape(rng, int(rng.integers(1, 3)))
    n = int(rng.integers(1, 4))
    # XLA's CPU sorts a 2-bit integer wrongly and corrupts the heap (coverage._NEVER): no oracle
    dts = [pick(rng, tuple(d for d in BOOL + REAL + SUBBYTE + FP8 + COMPLEX if d not in _TWO_BIT))]
    dts += [pick(rng, tuple(d for d in ALL if d not in _TWO_BIT)) for _ in range(n - 1)]
    xs = [values(rng, shp, d) for d in dts]
    keys = int(rng.integers(1, n + 1))
    dim = int(rng.integers(0, len(shp)))
    stable = bool(rng.random() < 0.5)
    return Program("sort", lambda *a: lax.sort(a, dimension=dim, num_keys=keys,
                                               is_stable=stable),
                   xs, EXACT, f"sort[{','.join(d.name for d in dts)}]{list(shp)}d{dim}k{keys}"
                   f"{'s' if stable else ''}", _fnuz_tag(dts[:keys]))


def _fnuz_tag(keys: list[np.dtype]) -> frozenset[str]:
    """fnuz-nan-order: keys of an fnuz type, whose NaN has -0's bits (where XLA's total order
    puts it is open in benchmarks/results/fuzz_findings.md)."""
    return frozenset({"fnuz-nan-order"}) if set(keys) & set(FNUZ) else frozenset()


def topk(rng: np.random.Generator) -> Program:
    f4 = np.dtype(ml_dtypes.float4_e2m1fn)
    dt = pick(rng, BOOL + INT + FLOAT + tuple(d for d in FP8 if d != f4))
    shp = (*shape(rng, int(rng.integers(0, 3))), int(rng.integers(1, 7)))
    k = int(rng.integers(0, shp[-1] + 1))
    x = values(rng, shp, dt)
    return Program("topk", lambda a: lax.top_k(a, k), [x], EXACT,
                   f"topk[{dt.name}]{list(shp)}k{k}", _fnuz_tag([dt]))


def _part(t: np.dtype) -> np.dtype:
    return np.dtype({"complex64": "float32", "complex128": "float64"}.get(t.name, t.name))


def _dot_tolerance(a_t: np.dtype, b_t: np.dtype, pref: np.dtype | None) -> str:
    """ACCUM, or `accum@<type>` where XLA computes a complex dot in its operands' type, narrower
    than the requested output's (c64 x c64 -> f64 sums in c64: f32 roundings in an f64)."""
    if pref is None or pref.kind not in "fc" or a_t.kind != "c" or b_t.kind != "c":
        return ACCUM  # (real operands: measured to be computed in the output's type)
    comp = max((_part(a_t), _part(b_t)), key=lambda d: d.itemsize)
    return f"{ACCUM}@{comp.name}" if comp.itemsize < _part(pref).itemsize else ACCUM


def dot(rng: np.random.Generator, no_complex_mixed: bool) -> Program:
    kinds = INT + FLOAT + COMPLEX
    a_t = pick(rng, kinds + BOOL + SUBBYTE + FP8) if rng.random() < 0.3 else pick(rng, kinds)
    b_t = a_t if rng.random() < 0.5 else pick(rng, kinds)
    if no_complex_mixed and (a_t.kind == "c" or b_t.kind == "c") and a_t != b_t:
        b_t = a_t
    m, k, n, b = (int(rng.integers(0 if rng.random() < 0.05 else 1, 5)) for _ in range(4))
    # XLA's CPU dots 2-bit integers only as vector . vector (a multiply and a reduce)
    form = "vv" if {a_t, b_t} & set(_TWO_BIT) else pick(rng, ("vv", "mv", "mm", "batch"))
    shapes = {"vv": ((k,), (k,), (((0,), (0,)), ((), ()))),
              "mv": ((m, k), (k,), (((1,), (0,)), ((), ()))),
              "mm": ((m, k), (k, n), (((1,), (0,)), ((), ()))),
              "batch": ((b, m, k), (b, k, n), (((2,), (1,)), ((0,), (0,))))}
    sa, sb, dn = shapes[form]
    x, y = values(rng, sa, a_t, 0.02), values(rng, sb, b_t, 0.02)
    pref = None if rng.random() < 0.6 or {a_t, b_t} & set(_OWN_TYPE_DOT) else pick(rng, kinds)
    tags = frozenset({"complex-dot"}) if "c" in (a_t.kind, b_t.kind) else frozenset()
    if pref is not None and pref.kind in "iu" and "f" in (a_t.kind, b_t.kind):
        tags = tags | {"float-dot-int-result"}
    if pref is not None and pref.kind in "iu" and {a_t, b_t} & set(SMALL_FLOAT):
        # open: XLA rounds the float sum to the 16-/8-/4-bit operand type before converting
        tags = tags | {"small-float-dot-int-result"}
    return Program("dot", lambda p, q: lax.dot_general(p, q, dn, preferred_element_type=pref),
                   [x, y], _dot_tolerance(a_t, b_t, pref),
                   f"dot-{form}[{a_t.name}x{b_t.name}->{getattr(pref, 'name', None)}]", tags)


def conv(rng: np.random.Generator) -> Program:
    common = FLOAT + COMPLEX + SINT[:3]
    # (XLA's CPU has no 2-bit integer convolution: UNIMPLEMENTED)
    dt = pick(rng, common) if rng.random() < 0.7 else pick(
        rng, tuple(d for d in BOOL + SINT[3:] + UINT + SUBBYTE + FP8 if d not in _TWO_BIT))
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


def fft(rng: np.random.Generator) -> Program:
    dt = pick(rng, COMPLEX + FLOAT[2:])
    kind = pick(rng, ("FFT", "IFFT") if dt.kind == "c" else ("RFFT",))
    shp = (*shape(rng, int(rng.integers(0, 2)), empty=0), int(rng.integers(1, 9)))
    x = values(rng, shp, dt, 0.0)
    ln = (shp[-1],)
    return Program("fft", lambda a: lax.fft(a, kind, ln), [x], ACCUM,
                   f"fft-{kind}[{dt.name}]{list(shp)}")

