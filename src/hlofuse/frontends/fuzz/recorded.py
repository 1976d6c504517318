"""Behaviours of jax.jit itself that depend on more than the values, which hlofuse records
instead of copying (benchmarks/results/fuzz_findings.md): a program whose only differences are
of one of these kinds is `recorded` (with the reason), not a disagreement.

    recorded(program, got, want) -> the reason, or '' (a disagreement after all)

Conditions enforced, per kind; every other difference in the program's outputs must still pass
`compare` once the recorded elements are set aside:

- `log` of f32 subnormals: jax.jit gives -103.97208 (log 2^-150; NaN for a negative subnormal)
  for some array sizes (3, 5-7 elements, the tails of 11 and 13-15) and -inf for others (1, 2,
  4, 8-10, 12, 16 and more; every 2-D shape measured). hlofuse gives -inf, the flushed
  operand's log, at every size. Set aside: elements whose input is a nonzero f32 subnormal,
  where hlofuse has -inf and jax.jit -103.97208 or NaN.
- complex dots, every form: where a product is not finite, XLA's NaN/inf pattern depends on
  the route its CPU backend takes for the shape. Vector forms (vector . vector,
  matrix . vector, N = 1 batches): whether it strength-reduces the dot to a multiply and
  reduce, and the host's vector width (Eigen's scalar path for few rows). Matrix . matrix:
  Eigen's gemm scales the sum by 1 + 0i (an inf part makes the other NaN: c64 [4,2] x [2,3]
  gives nan+nanj), while other small shapes keep inf+infj or -inf+nanj ([2,2] x [2,5], [3,5] x
  [5,3], measured on AVX2). hlofuse keeps Eigen's gemm rule on every host and shape.
  Set aside: elements not finite (a part inf or NaN) in both results.
- products of floats (`reduce-mul-*` of a real float type): XLA's CPU multiplies a product
  reduction in vector lanes whose count is the host's vector width (8 f32 lanes with AVX2, 16
  with AVX-512) and combines the lanes at the end, so a lane's partial product can overflow to
  inf (or underflow to 0) where the product in order does not, or the other way round (measured:
  36 bf16 values with one near the f32 maximum, 2.6e33 in order and with 4 lanes, inf with 8 or
  16). hlofuse multiplies in order on every host. Set aside: elements where exactly one of the
  two results is inf or 0 and neither is NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hlofuse.frontends.fuzz.base import Program
from hlofuse.frontends.fuzz.compare import compare

LOG_OF_SUBNORMAL = np.float32(-103.97208)
DOT_FORMS = "dot-"


def _log_of_subnormal(p: Program, g: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    if not p.desc.startswith("log[float32]") or len(p.args) != 1 or g.dtype != np.float32:
        return None
    x = np.asarray(p.args[0], dtype=np.float32)
    if x.shape != g.shape:
        return None
    sub = (x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)
    jaxs = (w == LOG_OF_SUBNORMAL) | np.isnan(w)
    return sub & (g == -np.inf) & jaxs


def _complex_dot(p: Program, g: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    if not p.desc.startswith(DOT_FORMS) or g.dtype.kind != "c":
        return None
    return ~np.isfinite(g) & ~np.isfinite(w)


def _product_lanes(p: Program, g: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    if not p.desc.startswith("reduce-mul-") or g.dtype.kind == "c" or g.dtype.kind in "iub":
        return None
    gf, wf = g.astype(np.float64), w.astype(np.float64)
    edge = lambda v: np.isinf(v) | (v == 0)  # noqa: E731
    return (edge(gf) != edge(wf)) & ~np.isnan(gf) & ~np.isnan(wf)


_KINDS = (
    (_log_of_subnormal, "jax.jit's f32 log of a subnormal depends on the array's size "
                        "(-103.97 or -inf); hlofuse gives -inf"),
    (_complex_dot, "jax.jit's NaN/inf pattern of a complex dot depends on the host, the shape "
                   "and strength reduction; hlofuse keeps one rule"),
    (_product_lanes, "jax.jit multiplies a product in the host's vector lanes, whose partial "
                     "products overflow or underflow where the product in order does not"),
)


def recorded(p: Program, got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str:
    """The reason `got` differs from jax.jit's `want` only in a recorded way, or ''."""
    if len(got) != len(want):
        return ""
    for kind, reason in _KINDS:
        g2, w2, hit = [], [], False
        for g, w in zip(got, want, strict=True):
            g, w = np.asarray(g), np.asarray(w)
            mask = kind(p, g, w) if g.shape == w.shape and g.dtype == w.dtype else None
            if mask is not None and mask.any():
                hit = True
                g, w = g.copy(), w.copy()
                g[mask] = 0
                w[mask] = 0
            g2.append(g)
            w2.append(w)
        if hit and not compare(g2, w2, p.tol):
            return reason
    return ""
