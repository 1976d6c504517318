"""A dot with a complex operand or a complex result, as XLA's CPU backend computes it.

XLA's ResultCaster and OperandUpcaster give such a dot one complex type `t`: c128 where an
operand or the result is c128, else c64 (XLA's HigherPrecisionElementType puts any complex
type above every real one). Each operand is converted to `t` first (an f64 operand of a c64
dot is rounded to f32 parts, so 1e39 becomes inf), the products are summed in `t`'s
component type (f32 for c64: a product or a sum past 2^128 is inf) as Eigen's gemm sums them,
four real sums combined at the end (re = sum ar*br - sum ai*bi, im = sum ar*bi + sum ai*br;
numpy's and C's complex `*` recover infinities as C99 Annex G does, XLA's dot does not), and
the sum is converted to the result type. The sum is scaled by 1 + 0i, a plain
complex multiply, as Eigen's gemm (XLA's CPU dot) does: a part that is not finite makes the
other part NaN (inf - 2i -> inf + nan i). A dot of one term per result (K = 1) is XLA's
complex multiply instead (the fused formula, unscaled: inf+infj stays; measured on every
[B,] M x 1 x N shape). jax.jit differs where XLA does not call Eigen's
gemm: dots it strength-reduces to multiply and reduce (vector . vector: no scaling) and
Eigen's scalar path for c64 matrix-vector products with few rows (Annex G products; how
many rows take it depends on the host's vector width). The converted sum:

- a complex result: rounded to it;
- a float result: the real part, rounded (c64 x c64 -> f64 is the c64 sum's real part,
  widened; jax.jit agrees);
- an integral result: the real part, converted by the raw LLVM `fptosi` / `fptoui` XLA emits
  for a complex->integer convert (not its saturating float->integer convert), as x86-64
  without AVX-512 executes them: `cvttss2si`/`cvttsd2si` give the "integer indefinite" value
  (the type's minimum) for NaN and out-of-range values; s8/s16/s32 convert through 32 bits,
  u32 and narrower unsigned types through 64 bits (wrapping: -3 -> 4294967293), u64 as
  LLVM's branch-free `r1 | (r2 & (r1 >> 63))` with r1 = cvtt(x), r2 = cvtt(x - 2^63)
  (NaN -> 2^63, -1 -> 2^64 - 1). AVX-512 hosts convert unsigned types with `vcvttss2usi`,
  which gives all ones for negative and out-of-range values instead;
- a pred result: the sum != 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hlofuse.backends.interpreter.numerics import wrap
from hlofuse.ir.dtypes import DType, from_numpy

_I64_MIN = -(2**63)


def _cvtt(x: np.ndarray, bits: int) -> np.ndarray:
    """x86's truncating float->int conversion to a `bits`-bit signed integer (as int64): the
    minimum for NaN and for values outside the type's range."""
    lo, hi = -(2.0 ** (bits - 1)), 2.0 ** (bits - 1)
    t = np.trunc(x.astype(np.float64))
    ok = (t >= lo) & (t < hi)  # False for NaN
    return np.where(ok, np.where(ok, t, 0.0).astype(np.int64), -(2 ** (bits - 1)))


def _float_to_int(x: np.ndarray, out: DType) -> np.ndarray:
    """LLVM's fptosi / fptoui of the float array `x` to `out`, as executed on x86-64."""
    if out.is_signed:
        wide = _cvtt(x, 64) if out.bits == 64 else _cvtt(x, 32)
        return wrap(wide, out) if out.bits < 32 else wide.astype(out.np)
    if out.bits < 64:
        return wrap(_cvtt(x, 64), out)
    r1 = _cvtt(x, 64)
    r2 = _cvtt(x - x.dtype.type(2.0**63), 64)
    return (r1 | (r2 & (r1 >> 63))).astype(np.uint64)


def complex_dot(spec: str, lhs: np.ndarray, rhs: np.ndarray, out: DType) -> np.ndarray:
    """The einsum `spec` of `lhs` and `rhs`, one of them or the result `out` complex, in
    XLA's complex type for the dot, converted to `out` (module docstring)."""
    wide = any(d.is_complex and d.bits == 128
               for d in (from_numpy(lhs.dtype), from_numpy(rhs.dtype), out))
    t = np.dtype(np.complex128 if wide else np.complex64)
    a, b = lhs.astype(t), rhs.astype(t)

    def dot(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.asarray(np.einsum(spec, x, y, optimize=True))

    if _contracted_size(spec, a) == 1:
        value = _multiply(dot, a, b)  # XLA rewrites the dot as a multiply
    else:
        value = _gemm(dot, a, b)
    value = value.astype(t)
    if out.is_complex:
        return value.astype(out.np)
    if out.is_pred:
        return np.asarray(value != 0)
    if out.is_float:
        return value.real.astype(out.np)
    return np.asarray(_float_to_int(value.real, out))


def _contracted_size(spec: str, a: np.ndarray) -> int:
    """The number of terms each result element sums: the lhs axes the einsum `spec` drops."""
    lhs, out = spec.split("->")
    lhs = lhs.split(",")[0]
    return int(np.prod([n for c, n in zip(lhs, a.shape, strict=True) if c not in out]))


def _multiply(dot: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A dot of one term per result, which XLA's CPU computes as a complex multiply (its
    fused formula, `numerics.complex_multiply`; no 1 + 0i scaling: (inf+infj) stays, measured
    on every [B,] M x 1 x N shape): the products exact in f64 for c64, each part fused."""
    part = a.real.dtype.type
    w = np.float64
    with np.errstate(all="ignore"):
        ar, ai, br, bi = (np.asarray(v, w) for v in (a.real, a.imag, b.real, b.imag))
        re = dot(ar, br) - dot(ai, bi).astype(part).astype(w)
        im = dot(ai, br) + dot(ar, bi).astype(part).astype(w)
    value = np.empty(re.shape, np.complex128)
    value.real, value.imag = re.astype(part), im.astype(part)
    return value


def _gemm(dot: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Eigen's gemm (module docstring)."""
    with np.errstate(all="ignore"):  # products as XLA forms them: no C99 Annex G recovery
        # in the component type, four sums combined at the end, as Eigen's gemm (XLA's CPU
        # dot): a c64 product or sum past 2^128 is inf, inf - inf NaN
        re = dot(a.real, b.real) - dot(a.imag, b.imag)
        im = dot(a.real, b.imag) + dot(a.imag, b.real)
        # Eigen's gemm scales the sum by alpha = 1 + 0i, a plain complex multiply: a part
        # that is not finite makes the other part NaN (inf-2i -> inf+nan i)
        zero = re.dtype.type(0)
        re, im = re - im * zero, re * zero + im
    value = np.empty(re.shape, np.complex128)
    value.real, value.imag = re, im
    return value
