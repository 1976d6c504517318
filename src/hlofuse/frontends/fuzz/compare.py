"""Output comparison for the fuzzer, with a tolerance per op class and element type.

Conditions enforced (`compare(got, want, tol)` returns '' or the first difference):

* the same number of outputs, each with jax's shape and dtype;
* integers and bools: exactly equal (`exact` ops on floats too, up to the sign of zero);
* floats: NaN where jax has NaN (any payload), the same infinities, and otherwise
  |got - want| <= k ulp(want) in the output's own type (k by class: exact 0, ulp 2, trans 8)
  or <= the type's smallest normal (subnormals: hlofuse flushes them by default as XLA's CPU
  runtime does; a flushed-vs-kept subnormal is not a disagreement);
* accum (sums of products: reductions, dots, convolutions, fft): |got - want| <=
  64 eps max(1, max|want|), relative to the output's scale (summation order is free in XLA);
  `accum@<type>` takes eps of <type>, the type the op computes in where that is narrower than
  the output (a c64 x c64 dot into f64 is summed in c64: f32 rounding, f64 output);
* complex numbers: real and imaginary parts each, with the ulp of the larger part (trans:
  256 ulps, as complex functions compose several real ones).
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np

_ULPS = {"exact": 0, "ulp": 2, "trans": 8}


def _finfo(dt: np.dtype) -> tuple[float, float, int]:
    fi = ml_dtypes.finfo(dt)
    return float(fi.eps), float(fi.tiny), int(fi.nmant)


def _float_diff(g: np.ndarray, w: np.ndarray, dt: np.dtype, tol: str,
                scale: np.ndarray | None = None, complex_: bool = False) -> np.ndarray:
    """Mask of elements that disagree (float64 views `g`, `w` of type `dt`)."""
    eps, tiny, nmant = _finfo(dt)
    if tol.startswith("accum@"):  # the compute type's precision, the output's range
        eps = float(ml_dtypes.finfo(np.dtype(tol.split("@", 1)[1])).eps)
        tol = "accum"
    nan_g, nan_w = np.isnan(g), np.isnan(w)
    inf_bad = (np.isinf(g) | np.isinf(w)) & (g != w)
    with np.errstate(all="ignore"):
        d = np.abs(g - w)
        ref = np.abs(w) if scale is None else scale
        if tol == "accum":
            top = float(np.nanmax(np.where(np.isfinite(w), np.abs(w), 0))) if w.size else 0.0
            allowed = 64 * eps * max(1.0, top)
        else:
            big = float(ml_dtypes.finfo(dt).max)
            expo = np.floor(np.log2(np.clip(np.nan_to_num(ref, nan=tiny), tiny, big)))
            k = _ULPS.get(tol, 2) * (32 if complex_ and tol == "trans" else 1)
            allowed = k * np.exp2(expo - nmant)
        bad = ~(d <= np.maximum(allowed, tiny))
    inf_any = np.isinf(g) | np.isinf(w)
    bad = np.where(inf_any, inf_bad, bad)
    return np.where(nan_g | nan_w, nan_g != nan_w, bad)


def compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray], tol: str) -> str:
    """'' when `got` matches `want` under tolerance class `tol`, else the first difference."""
    if len(got) != len(want):
        return f"{len(got)} outputs, jax has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i}: {g.dtype}{list(g.shape)}, jax has {w.dtype}{list(w.shape)}"
        if w.size == 0:
            continue
        if w.dtype.kind in "biu" or (w.dtype.kind == "V" and _is_int(w.dtype)):
            gi, wi = g.astype(object), w.astype(object)
            if not np.array_equal(gi, wi):
                bad = tuple(np.argwhere(gi != wi)[0])
                return f"output {i} at {bad}: {g[bad]!r} vs jax {w[bad]!r}"
            continue
        if w.dtype.kind == "c":
            part = np.float32 if w.dtype.itemsize == 8 else np.float64
            gc, wc = g.astype(np.complex128), w.astype(np.complex128)
            scale = np.maximum(np.abs(wc.real), np.abs(wc.imag))
            mask = (_float_diff(gc.real, wc.real, np.dtype(part), tol, scale, True)
                    | _float_diff(gc.imag, wc.imag, np.dtype(part), tol, scale, True))
            gw, ww = gc, wc
        else:
            gw, ww = g.astype(np.float64), w.astype(np.float64)
            mask = _float_diff(gw, ww, w.dtype, tol)
        if mask.any():
            bad = tuple(np.argwhere(mask)[0])
            return f"output {i} at {bad}: {gw[bad]!r} vs jax {ww[bad]!r} ({tol}, {w.dtype})"
    return ""


def _is_int(dt: np.dtype) -> bool:
    try:
        ml_dtypes.iinfo(dt)
    except ValueError:
        return False
    return True
