"""Multiply reductions of floats and complex numbers as XLA's CPU computes them: in the element
type, in order (the init value, then the elements: a reduce's in row-major order, a
reduce-window's in `window_order`), and under `subnormals="flush"` with every partial product
flushed, as FTZ does between the steps of XLA's loop.

Flushing each step matters where a partial product falls below the smallest normal: FTZ makes
it a zero that stays zero, or becomes NaN at an infinity (0 x inf), where gradual underflow or a
wider accumulator keeps a tiny value that an infinity makes infinite again (2811/041 of the
20,000-program fuzz run: inf instead of jax.jit's NaN). Conditions enforced:

* real floats accumulate in their type (f32 in f32: products overflow at 2^128); bf16 and f16
  steps are f32 products rounded to the type, as XLA computes them;
* f32, f64 and bf16 flush (bf16 by its f32 product, XLA's), f16 and the 8-bit floats do not;
* complex numbers multiply by XLA's fused formula in the component type
  (`numerics.complex_multiply`), each product's parts flushed;
* vectorised: a real product is one `multiply.accumulate` per row; the first partial product
  that FTZ flushes is found from the products of the exact partials, and what follows a
  flushed zero is known in closed form (a zero of the product's sign, NaN if an infinity or a
  NaN comes later). Complex products take one vector step per reduced element.
"""

from __future__ import annotations

import numpy as np

from hlofuse.backends.interpreter.flush import flush as flush_value
from hlofuse.backends.interpreter.numerics import complex_multiply
from hlofuse.ir.dtypes import from_numpy

_FLUSHED = ("f32", "f64", "bf16")


def _tiny(dtype: np.dtype) -> float | None:
    """The smallest normal of the type FTZ flushes a step of `dtype` in, or None."""
    name = from_numpy(dtype).name
    if name not in _FLUSHED:
        return None
    return float(np.finfo(np.float64).tiny) if name == "f64" else \
        float(np.finfo(np.float32).tiny)


def _wide(dtype: np.dtype) -> np.dtype:
    """The type one step's product is computed in (f32 for the types narrower than f32)."""
    return np.dtype(np.float32) if from_numpy(dtype).bits < 32 else dtype


def product(rows: np.ndarray, init: np.ndarray, flush: bool) -> np.ndarray:
    """The products of (M, K) `rows` along axis 1, each starting at `init`: (M,)."""
    dtype = rows.dtype
    m = rows.shape[0]
    first = np.broadcast_to(np.asarray(init).astype(dtype), (m, 1))
    if from_numpy(dtype).is_complex:
        part = from_numpy(dtype).component.np.type
        acc = first[:, 0].copy()
        for j in range(rows.shape[1]):
            acc = complex_multiply(acc, rows[:, j], part).astype(dtype)
            if flush:
                acc = flush_value(acc)
        return acc
    vals = np.concatenate([first, rows], axis=1)
    with np.errstate(all="ignore"):
        partial = np.multiply.accumulate(vals, axis=1)
    total = partial[:, -1].copy()
    tiny = _tiny(dtype)
    if not flush or tiny is None or vals.shape[1] < 2:
        return total
    wide = _wide(dtype)
    with np.errstate(all="ignore"):
        step = partial[:, :-1].astype(wide) * vals[:, 1:].astype(wide)
    flushed = (step != 0) & (np.abs(step) < tiny)
    hit = flushed.any(axis=1)
    if not hit.any():
        return total
    j = np.argmax(flushed, axis=1)  # the first step FTZ makes zero
    later = np.arange(1, vals.shape[1])[None, :] > (j + 1)[:, None]
    rest = vals[:, 1:].astype(np.float64)
    nan = (later & ~np.isfinite(rest)).any(axis=1)
    negative = np.signbit(step[np.arange(m), j]) ^ \
        ((later & np.signbit(rest)).sum(axis=1) % 2 == 1)
    zero = np.where(negative, -0.0, 0.0)
    out = np.where(hit, np.where(nan, np.nan, zero), total.astype(np.float64))
    return out.astype(dtype)


def multiply_step(acc: np.ndarray, x: np.ndarray, flush: bool) -> np.ndarray:
    """One step `acc * x` of a multiply reduction in the element type (a reduce-window's)."""
    dtype = acc.dtype
    dt = from_numpy(dtype)
    if dt.is_complex:
        out = complex_multiply(acc, x, dt.component.np.type).astype(dtype)
    else:
        with np.errstate(all="ignore"):
            wide = _wide(dtype)
            out = (acc.astype(wide) * x.astype(wide))
            tiny = _tiny(dtype)
            if flush and tiny is not None:
                out = np.where((out != 0) & (np.abs(out) < tiny), out * 0, out)
            out = out.astype(dtype)
    return flush_value(out) if flush else out

