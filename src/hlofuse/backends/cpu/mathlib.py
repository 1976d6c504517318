"""Vectorizable math library for the CPU backend: C text of `static inline` elementwise functions.

`source()` returns C (needs only <stdint.h>, <math.h>, <string.h>) defining `hf_<fn>_f32(float)`
and `hf_<fn>_f64(double)` for the transcendental HLO opcodes listed in `FUNCTIONS`
(opcode text -> (f32 C name, f64 C name)); `power` and `atan2` take two arguments
(`atan2(y, x)` in HLO operand order).

Conditions the f32 routines enforce (checked by tests/test_cpu_mathlib.py, measured over every
f32 bit pattern by scripts/mathlib_ulp.py; see docs/mathlib.md):

* Branch-free: only arithmetic, comparisons feeding `?:` selects, bit casts through `memcpy`
  and small table loads, so GCC 12 with `-O3 -march=native -fno-math-errno -ffp-contract=off`
  (no -ffast-math) SIMD-vectorizes a loop calling them. `fma` is used only under `__FMA__`.
* Error at most `MAX_ULP[opcode]` f32 ulps of the float64 reference (numpy), over ALL finite
  f32 inputs: sin/cos/tan reduce huge arguments exactly (Cody-Waite in double for |x| < 2^17,
  a 192-bit table of 2/pi with integer arithmetic beyond); the core is evaluated in double
  and rounded to float once. Except exp, log, tanh, logistic, and sin/cos for |x| < 4096, the
  kernels' hot functions: those run in f32 arithmetic (`vmath.py`, within about 1 ulp;
  logistic 2.4) and have explicit vector forms of the same operations, so vector loops and
  scalar code agree bit for bit (sin/cos beyond 4096, inf and nan: the double routines
  `hf__sin_dbl_f32` / `hf__cos_dbl_f32` above, in both forms).
* IEEE special values as numpy gives them: nan in -> nan out, sin(inf) = nan, exp overflow ->
  inf, underflow -> denormals/0, log(0) = -inf, log(<0) = nan, denormal inputs are not
  flushed, signed zeros kept (sin(-0) = -0), `power` follows C99/numpy `pow` special cases,
  `atan2` C99/numpy `atan2` (signed zeros and infinities).

The f64 routines call the C library (scalar, not vectorized); sqrt and rsqrt use the
vectorizable `__builtin_sqrt`, logistic is `exp`-based in the interpreter's stable form, and
log1p is XLA's own approximation (up to 128 ulps from the C library's near |x| = 0.414: jax.jit's
values, `interpreter/numerics.log1p_f64`).
`harness_source`, `reference`, `ulp_error` and `call_array` serve the measurements.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from hlofuse.backends.cpu import vmath

__all__ = ["FUNCTIONS", "INLINE_WEIGHT", "MAX_ULP", "harness_source", "inline_weight", "reference",
           "source", "ulp_error"]

# opcode text -> (f32 C function, f64 C function)
FUNCTIONS: dict[str, tuple[str, str]] = {
    "sine": ("hf_sin_f32", "hf_sin_f64"),
    "cosine": ("hf_cos_f32", "hf_cos_f64"),
    "tan": ("hf_tan_f32", "hf_tan_f64"),
    "exponential": ("hf_exp_f32", "hf_exp_f64"),
    "exponential-minus-one": ("hf_expm1_f32", "hf_expm1_f64"),
    "log": ("hf_log_f32", "hf_log_f64"),
    "log-plus-one": ("hf_log1p_f32", "hf_log1p_f64"),
    "tanh": ("hf_tanh_f32", "hf_tanh_f64"),
    "logistic": ("hf_logistic_f32", "hf_logistic_f64"),
    "sqrt": ("hf_sqrt_f32", "hf_sqrt_f64"),
    "rsqrt": ("hf_rsqrt_f32", "hf_rsqrt_f64"),
    "cbrt": ("hf_cbrt_f32", "hf_cbrt_f64"),
    "power": ("hf_pow_f32", "hf_pow_f64"),
    "atan2": ("hf_atan2_f32", "hf_atan2_f64"),
    "erf": ("hf_erf_f32", "hf_erf_f64"),
}

# Documented maximum error of the f32 routines in f32 ulps of the float64 reference, as measured
# by scripts/mathlib_ulp.py over every f32 bit pattern (rounded up a little).
MAX_ULP: dict[str, float] = {
    "sine": 0.78,
    "cosine": 0.79,
    "tan": 0.51,
    "exponential": 0.94,
    "exponential-minus-one": 0.51,
    "log": 0.84,
    "log-plus-one": 0.51,
    "tanh": 6.9,  # XLA's approximation, jax.jit's bits (vmath.py): 4.9 with FMA, 6.9 without
    "logistic": 2.41,
    "sqrt": 0.5,
    "rsqrt": 0.51,
    "cbrt": 0.51,
    "power": 0.51,
    "atan2": 0.51,
    "erf": 0.51,
}

BINARY: frozenset[str] = frozenset({"power", "atan2"})

# How much an inlined lane loop of the f32 routine costs GCC, in lane loops of a small one
# (kernel_ir/passes/outline.INLINE_LANE_LOOPS counts these, `cprint.lane_cost` hands them
# over): the routines evaluated in double (power, tan, atan2) or with long polynomials (erf)
# vectorize into several registers of doubles per lane vector, and GCC's time grows faster
# than a function's size. Measured on AVX-512, 16-lane f32 loops: 16 inlined erf took 1.8 s
# of -O2, 32 took 6.4 s (cbrt or expm1: 0.15 s for 16); brax's hopper (MJX) had a kernel of
# 22 inlined power loops that took 4.8 s, 0.5 s with them called. A call costs a chain of
# these ops at most 12% (erf, atan2; power 2%), paid only past the budget.
INLINE_WEIGHT: dict[str, int] = {"erf": 16, "power": 8, "tan": 8, "atan2": 8}


def inline_weight(opcode: str, dtype: str) -> int:
    """Lane loops an inlined lane loop of `opcode` on `dtype` counts as (`INLINE_WEIGHT`; 1 for
    other ops and for f64, whose routines call the C library)."""
    return INLINE_WEIGHT.get(opcode, 1) if dtype != "f64" else 1


def _hex(v: float) -> str:
    return float(v).hex()


def _horner(var: str, coeffs: list[float]) -> str:
    """C expression for sum(coeffs[i] * var**i), Horner form with HF_FMA."""
    expr = _hex(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        expr = f"HF_FMA({expr}, {var}, {_hex(c)})"
    return expr


def _fx(text: str) -> list[float]:
    """Whitespace-separated C99 hexadecimal floats -> floats (exact)."""
    return [float.fromhex(v) for v in text.split()]


def _inv_fact(n: int) -> float:
    return 1.0 / math.factorial(n)


# exp(r) - 1 = r + r^2 * E(r), |r| <= ln2/2: Taylor to r^11 (error < 1e-14 relative).
_EXPM1 = [_inv_fact(n) for n in range(2, 12)]
# sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4 (Taylor to r^13 / r^14).
_SIN = [(-1) ** n * _inv_fact(2 * n + 1) for n in range(1, 7)]
_COS = [(-1) ** n * _inv_fact(2 * n) for n in range(2, 8)]
# log z = 2s + s^3 L(s^2), s = (z-1)/(z+1), |s| <= 0.1716: Taylor 2/(2k+3), error < 1e-16.
_LOG = [2.0 / (2 * k + 3) for k in range(10)]
# atan t = t + t^3 A(t^2), |t| <= tan(pi/8): least-squares fit, error < 5e-15 relative.
_ATAN = _fx(
    """
    -0x1.55555555554adp-2 0x1.9999999909156p-3 -0x1.249248bf7ade8p-3 0x1.c71c3eb4e52ebp-4
    -0x1.7456c2a95855ap-4 0x1.3aa36a19b66d2p-4 -0x1.0c77da4f0ba06p-4 0x1.a85ffd9c7375ap-5
    -0x1.c0b9f5c7b8e43p-6
    """
)
# erf x = x Q(x^2) for |x| < 0.5 (least squares, error < 1e-15 relative).
_ERF_SMALL = _fx(
    """
    0x1.20dd750429b6fp+0 -0x1.812746b037994p-2 0x1.ce2f21a03a542p-4 -0x1.b82ce30d49b84p-6
    0x1.565bcb72ae395p-8 -0x1.c02d27dd1d2c2p-11 0x1.f9875870ed136p-14 -0x1.f19e52d26f8bbp-17
    0x1.86cef326332bap-20
    """
)
# erf on [i/2, i/2 + 1/2), i = 1..7: degree-11 polynomial in t = |x| - (i/2 + 1/4) (error < 4e-15).
_ERF_TABLE = _fx(
    """
    0x1.6c1c9759d0e73p-1 0x1.492e42d78d34dp-1 -0x1.edc5644362c98p-2 0x1.b6e8591daec08p-6
    0x1.349b5ec004724p-3 -0x1.b42a18227dff2p-5 -0x1.b847a8530a0ddp-6 0x1.2e0acba447985p-6
    0x1.2de0a4284e589p-9 -0x1.03fc8c7f88b31p-8 0x1.5d6772502b174p-13 0x1.3f2ebca3d52b7p-11
    0x1.d8865d98abe0ap-1 0x1.e4652fadcb53ep-3 -0x1.2ebf3dcca6f92p-2 0x1.571d01c5ee90cp-3
    -0x1.93a9a64d5d1ecp-8 -0x1.8281ce5d40524p-5 0x1.5cffeb4747e9ap-6 0x1.db44e2783877ep-9
    -0x1.755b6a98ab52cp-8 0x1.cbad33cecad1ep-11 0x1.9acfd824eeecap-11 -0x1.47f2a85a72530p-12
    0x1.f92d077f8d557p-1 0x1.b055303221212p-5 -0x1.7a4a8a2bb50e8p-4 0x1.7148c3d560420p-4
    -0x1.8a0da57d2b77cp-5 0x1.b22258b976be9p-8 0x1.25b3b6e6d2ae2p-7 -0x1.8d1129e8a4f92p-8
    0x1.7e49c6f090d52p-11 0x1.d4f52c87ff6a6p-11 -0x1.c2dfb34c959f1p-12 -0x1.2f338a0d0bc45p-17
    0x1.ff404760319b8p-1 0x1.d4143a9dfec22p-8 -0x1.074b60f91392ap-6 0x1.63ef61e812963p-6
    -0x1.38a9830159985p-6 0x1.5d3b17cc482f2p-7 -0x1.7cae5ec07aa46p-9 -0x1.5f834678b7133p-11
    0x1.06168e4c4ee5dp-10 -0x1.834995a9ffea8p-12 -0x1.069b71bca52edp-16 0x1.0faaaa145141fp-14
    0x1.fff2cfb0453d8p-1 0x1.3360ccd23cebcp-11 -0x1.a6a519a14ab04p-10 0x1.69cf466d1ab44p-9
    -0x1.ab0c272819bf8p-9 0x1.693595dc7f558p-9 -0x1.b2756599008b9p-10 0x1.52b64eaf3ab01p-11
    -0x1.75458fd14204cp-14 -0x1.2ae0fc003d030p-14 0x1.cb74d82cbb6abp-15 -0x1.01742f4a32226p-16
    0x1.ffff6f9f67e52p-1 0x1.e9b5e8d048488p-16 -0x1.8de3cd259cd68p-14 0x1.9aa489d8a4eb4p-13
    -0x1.2c7d5f9b4385ap-12 0x1.490a4f76caf55p-12 -0x1.145434a9755c1p-12 0x1.647ea6dd09e39p-13
    -0x1.568cfd8116e48p-14 0x1.b340714b96a1bp-16 -0x1.0aceedfbdfaf8p-19 -0x1.a0e4fc47df44ep-19
    0x1.fffffc2f171e5p-1 0x1.d9371e31d2fb8p-21 -0x1.bba3ac5e1180ap-19 0x1.0b6a7ae2fb9f4p-17
    -0x1.d06f55cd5f956p-17 0x1.3436c56416a8fp-16 -0x1.435800c12d41dp-16 0x1.110c7782f3208p-16
    -0x1.75576a2280390p-17 0x1.9a5fefa240f60p-18 -0x1.603474d767f0cp-19 0x1.87db709d6a745p-21
    """
)
# The first 192 bits of 2/pi; entry j of the table holds bits [8j - 24, 8j + 8) after the point
# (ARM optimized-routines' layout: the 96-bit window for an exponent starts at a byte boundary).
_TWO_OVER_PI_HEX = "A2F9836E4E441529FC2757D1F534DDC0DB6295993C439041"
_INV_PIO4 = [int(_TWO_OVER_PI_HEX[max(0, 2 * j - 6) : 2 * j + 2], 16) for j in range(24)]

_PRELUDE = r"""
/* ---- hlofuse mathlib: branch-free, vectorizable elementwise math ---- */
#ifndef HF_MATHLIB_INCLUDED
#define HF_MATHLIB_INCLUDED
#include <stdint.h>
#include <math.h>
#include <string.h>
/* always inlined: a call inside a vector loop would keep it scalar */
#define HF_INLINE static inline __attribute__((always_inline))
#ifdef __FMA__
#define HF_FMA(a, b, c) __builtin_fma((a), (b), (c))
#else
#define HF_FMA(a, b, c) ((a) * (b) + (c))
#endif

static inline uint32_t hf__as_u32(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float hf__as_f32(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static inline uint64_t hf__as_u64(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
static inline double hf__as_f64(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }
"""

_CORE = r"""
/* Selects as bit masks (c must be 0 or 1): a `?:` whose arm computes something that could
   trap (a conversion, a division) becomes a branch that GCC's if-conversion refuses without
   -fno-trapping-math, and the loop is not vectorized. */
HF_INLINE double hf__seld(int c, double a, double b)
{
    uint64_t m = (uint64_t)0 - (uint64_t)(uint32_t)c;
    return hf__as_f64((hf__as_u64(a) & m) | (hf__as_u64(b) & ~m));
}
HF_INLINE float hf__self(int c, float a, float b)
{
    uint32_t m = 0u - (uint32_t)c;
    return hf__as_f32((hf__as_u32(a) & m) | (hf__as_u32(b) & ~m));
}
HF_INLINE int32_t hf__seli(int c, int32_t a, int32_t b)
{
    uint32_t m = 0u - (uint32_t)c;
    return (int32_t)(((uint32_t)a & m) | ((uint32_t)b & ~m));
}

/* exp(t) = s * (1 + p): returns p = expm1(r) and s = 2^k, t = k ln2 + r. |t| <= 700. */
HF_INLINE double hf__expm1_core(double t, double *s)
{
    double kd = HF_FMA(t, 0x1.71547652b82fep+0, 0x1.8p52) - 0x1.8p52;
    double r = (t - kd * 0x1.62e42fefa3800p-1) - kd * 0x1.ef35793c76730p-45;
    int32_t k = (int32_t)kd;
    *s = hf__as_f64((uint64_t)(uint32_t)((k + 1023) << 20) << 32);
    return HF_FMA(r * r, @EXPM1@, r);
}

/* log(d) for positive, finite, normal d (every f32 converted to double is one). */
HF_INLINE double hf__log_core(double d)
{
    uint64_t ix = hf__as_u64(d);
    uint32_t tmp = (uint32_t)(ix >> 32) - 0x3fe6a09eu;
    int32_t k = (int32_t)tmp >> 20;
    double z = hf__as_f64(ix - ((uint64_t)(tmp & 0xfff00000u) << 32));
    double f = z - 1.0;
    double s = f / (2.0 + f);
    double w = s * s;
    double lz = HF_FMA(s * w, @LOG@, 2.0 * s);
    double kd = (double)k;
    return HF_FMA(kd, 0x1.62e42fefa3800p-1, HF_FMA(kd, 0x1.ef35793c76730p-45, lz));
}

/* atan(a) for a in [0, 1]. */
HF_INLINE double hf__atan_core(double a)
{
    int big = a > 0x1.a827999fcef32p-2; /* tan(pi/8) */
    double t = hf__seld(big, (a - 1.0) / (a + 1.0), a);
    double w = t * t;
    double p = HF_FMA(t * w, @ATAN@, t);
    return hf__seld(big, p + 0x1.921fb54442d18p-1, p);
}

static const uint32_t hf__inv_pio4[24] = {@INV_PIO4@};

/* x = q pi/2 + r, |r| <= pi/4 (returned), for finite ax >= 0: Cody-Waite with pi/2 in three
   parts when ax < 2^17, else the exact 32x96-bit integer product of the mantissa with the bits
   of 2/pi selected by the exponent (ARM optimized-routines' reduce_large). */
HF_INLINE double hf__rem_pio2_f32(float ax, int32_t *q)
{
    int big = ax >= 0x1p17f;
    double d = (double)hf__self(big, 0.0f, ax);
    double kd = HF_FMA(d, 0x1.45f306dc9c883p-1, 0x1.8p52) - 0x1.8p52;
    double rs = ((d - kd * 0x1.921fb54440000p+0) - kd * 0x1.68c234c4c0000p-39)
                - kd * 0x1.98a2e03707345p-77;
    uint32_t xi = hf__as_u32(ax);
    uint32_t j = (xi >> 26) & 15u;
    uint32_t m = ((xi & 0xffffffu) | 0x800000u) << ((xi >> 23) & 7u);
    uint64_t r0 = (uint64_t)(uint32_t)(m * hf__inv_pio4[j]);
    uint64_t r1 = (uint64_t)m * hf__inv_pio4[j + 4];
    uint64_t r2 = (uint64_t)m * hf__inv_pio4[j + 8];
    r0 = ((r2 >> 32) | (r0 << 32)) + r1;
    uint64_t n = (r0 + (1ull << 61)) >> 62;
    r0 -= n << 62;
    /* (double)(int64_t)r0 from two 32-bit halves: AVX2 has no int64 -> double conversion */
    double hi = (double)(int32_t)(uint32_t)(r0 >> 32), lo = (double)(int32_t)((uint32_t)r0 >> 1);
    double rl = HF_FMA(hi, 0x1p32, 2.0 * lo) * 0x1.921fb54442d18p-62;
    *q = hf__seli(big, (int32_t)n, (int32_t)kd);
    return hf__seld(big, rl, rs);
}

HF_INLINE double hf__sin_poly(double r, double w) { return HF_FMA(r * w, @SIN@, r); }
HF_INLINE double hf__cos_poly(double w) { return HF_FMA(w * w, @COS@, HF_FMA(-0.5, w, 1.0)); }

/* clamp to [lo, hi], nan stays nan */
HF_INLINE double hf__clamp(double t, double lo, double hi)
{
    return hf__seld(t > hi, hi, hf__seld(t < lo, lo, t));
}

"""

_F32 = r"""
HF_INLINE float hf__sin_dbl_f32(float x)
{
    float ax = fabsf(x);
    int fin = ax <= 0x1.fffffep127f; /* not inf, not nan */
    int32_t q;
    double r = hf__rem_pio2_f32(hf__self(fin, ax, 0.0f), &q);
    double w = r * r;
    double v = hf__seld(q & 1, hf__cos_poly(w), hf__sin_poly(r, w));
    v = hf__seld((q >> 1) & 1, -v, v);
    float y = hf__as_f32(hf__as_u32((float)v) ^ (hf__as_u32(x) & 0x80000000u));
    return hf__self(fin, y, x - x);
}

HF_INLINE float hf__cos_dbl_f32(float x)
{
    float ax = fabsf(x);
    int fin = ax <= 0x1.fffffep127f;
    int32_t q;
    double r = hf__rem_pio2_f32(hf__self(fin, ax, 0.0f), &q);
    double w = r * r;
    double v = hf__seld(q & 1, hf__sin_poly(r, w), hf__cos_poly(w));
    v = hf__seld(((q + 1) >> 1) & 1, -v, v);
    return hf__self(fin, (float)v, x - x);
}

HF_INLINE float hf_tan_f32(float x)
{
    float ax = fabsf(x);
    int fin = ax <= 0x1.fffffep127f;
    int32_t q;
    double r = hf__rem_pio2_f32(hf__self(fin, ax, 0.0f), &q);
    double w = r * r;
    double s = hf__sin_poly(r, w), c = hf__cos_poly(w);
    int odd = q & 1;
    double v = hf__seld(odd, -c, s) / hf__seld(odd, s, c);
    float y = hf__as_f32(hf__as_u32((float)v) ^ (hf__as_u32(x) & 0x80000000u));
    return hf__self(fin, y, x - x);
}

HF_INLINE float hf_expm1_f32(float x)
{
    double s;
    double p = hf__expm1_core(hf__clamp((double)x, -110.0, 100.0), &s);
    return hf__self(x == 0.0f, x, (float)HF_FMA(s, p, s - 1.0)); /* keeps -0 */
}

HF_INLINE float hf_log1p_f32(float x)
{
    double d = (double)x;
    double u = 1.0 + d;
    int ok = (u > 0.0) & (u < INFINITY);
    double uu = hf__seld(ok, u, 1.0);
    double c = (d - (uu - 1.0)) / uu; /* the rounding error of 1 + d, relative */
    double r = hf__log_core(uu) + hf__seld(ok, c, 0.0);
    r = hf__seld(d == -1.0, -INFINITY, r);
    r = hf__seld(d < -1.0, NAN, r);
    r = hf__seld((d == INFINITY) | (d != d) | (d == 0.0), d, r); /* keeps -0 */
    return (float)r;
}

HF_INLINE float hf_sqrt_f32(float x) { return __builtin_sqrtf(x); }

HF_INLINE float hf_rsqrt_f32(float x) { return (float)(1.0 / __builtin_sqrt((double)x)); }

HF_INLINE float hf_cbrt_f32(float x)
{
    double a = fabs((double)x);
    int ok = (a > 0.0) & (a < INFINITY);
    a = hf__seld(ok, a, 1.0);
    uint32_t hi = (uint32_t)(hf__as_u64(a) >> 32);
    int32_t g = (int32_t)((double)(int32_t)hi * (1.0 / 3.0)) + 715094163;
    double y = hf__as_f64((uint64_t)(uint32_t)g << 32);
    double y3 = y * y * y;
    y = y * (y3 + 2.0 * a) / (2.0 * y3 + a);
    y3 = y * y * y;
    y = y * (y3 + 2.0 * a) / (2.0 * y3 + a);
    y3 = y * y * y;
    y = y * (y3 + 2.0 * a) / (2.0 * y3 + a);
    return hf__self(ok, copysignf((float)y, x), x + x);
}

/* x^y of two f32 values held exactly in double (or x = +-2^-150: hf_pow_xla_f32), rounded to
   float once. */
HF_INLINE float hf__pow_dd_f32(double x, double y)
{
    double ax = fabs(x);
    int ok = (ax > 0.0) & (ax < INFINITY);
    double l = hf__log_core(hf__seld(ok, ax, 1.0));
    l = hf__seld(ax == 0.0, -INFINITY, l);
    l = hf__seld(ok | (ax == 0.0), l, ax); /* inf -> inf, nan -> nan */
    double s;
    double p = hf__expm1_core(hf__clamp(y * l, -200.0, 200.0), &s);
    double r = HF_FMA(s, p, s);
    double ay = fabs(y);
    int small = ay < 0x1p24;
    int32_t iy = (int32_t)hf__seld(small, y, 0.0);
    int yint = (!small) | ((double)iy == y);
    int odd = small & yint & (iy & 1);
    int xneg = (int)(hf__as_u64(x) >> 63);
    r = hf__seld(xneg & odd, -r, r);
    r = hf__seld((x < 0.0) & (x > -INFINITY) & !yint, NAN, r);
    r = hf__seld((ax == 1.0) & (ay == INFINITY), 1.0, r);
    r = hf__seld((x == 1.0) | (y == 0.0), 1.0, r);
    return (float)r;
}

HF_INLINE float hf_pow_f32(float x, float y) { return hf__pow_dd_f32((double)x, (double)y); }

/* power as XLA's CPU computes it (interpreter/flush.py `daz_power`): when this file flushes
   subnormals, the C library's pow under DAZ tells operands apart by their bits, so a subnormal
   exponent acts as +-2^-126 (a nonzero non-integer: (-2)^y is NaN) and a subnormal base as
   +-2^-150; IEEE pow otherwise. Takes the operands unflushed; bit tests and selects only. */
HF_INLINE float hf_pow_xla_f32(float x, float y)
{
#if HF_FLUSH_SUBNORMALS
    uint32_t ux = hf__as_u32(x), uy = hf__as_u32(y);
    int sx = ((ux & 0x7fffffffu) - 1u) < 0x007fffffu;
    int sy = ((uy & 0x7fffffffu) - 1u) < 0x007fffffu;
    double xd = hf__seld(sx, hf__seld((int)(ux >> 31), -0x1p-150, 0x1p-150), (double)x);
    double yd = hf__seld(sy, hf__seld((int)(uy >> 31), -0x1p-126, 0x1p-126), (double)y);
    return hf__pow_dd_f32(xd, yd);
#else
    return hf_pow_f32(x, y);
#endif
}

HF_INLINE float hf_atan2_f32(float y, float x)
{
    double ax = fabs((double)x), ay = fabs((double)y);
    int swap = ay > ax;
    double num = hf__seld(swap, ax, ay);
    double den = hf__seld(swap, ay, ax);
    double a = num / hf__seld(den == 0.0, 1.0, den);
    a = hf__seld(num == INFINITY, 1.0, a);
    double at = hf__atan_core(hf__seld(a == a, a, 0.0));
    double r = hf__seld(swap, 0x1.921fb54442d18p+0 - at, at);
    r = hf__seld(hf__as_u32(x) >> 31, 0x1.921fb54442d18p+1 - r, r);
    return hf__self((x == x) & (y == y), copysignf((float)r, y), x + y);
}

HF_INLINE float hf_erf_f32(float x)
{
    double ax = fabs((double)x);
    double w = ax * ax;
    double small = ax * @ERF_SMALL@;
    double ac = hf__seld(ax < 4.0, ax, 0.0);
    int32_t i = (int32_t)(ac * 2.0);
    i = hf__seli(i < 1, 1, i);
    double t = ac - ((double)i * 0.5 + 0.25);
    @ERF_HORNER@
    double r = hf__seld(ax < 0.5, small, big);
    r = hf__seld(ax >= 4.0, 1.0, r);
    return hf__self(x == x, copysignf((float)r, x), x);
}
"""

_F64 = r"""
/* f64: the C library (scalar), except the vectorizable sqrt/rsqrt. */
static inline double hf_sin_f64(double x) { return sin(x); }
static inline double hf_cos_f64(double x) { return cos(x); }
static inline double hf_tan_f64(double x) { return tan(x); }
static inline double hf_exp_f64(double x) { return exp(x); }
static inline double hf_expm1_f64(double x) { return expm1(x); }
static inline double hf_log_f64(double x) { return log(x); }
static inline double hf_log1p_f64(double x)
{
    /* XLA's (interpreter numerics.log1p_f64): Cephes' rational form below sqrt(2) - 1, its
       Horner steps fused as XLA's CPU fuses them, else log(1 + x) */
    double x2 = x * x;
    double p = 4.5270000862445199635215e-5;
    p = fma(p, x, 4.9854102823193375972212e-1);
    p = fma(p, x, 6.5787325942061044846969e0);
    p = fma(p, x, 2.9911919328553073277375e1);
    p = fma(p, x, 6.0949667980987787057556e1);
    p = fma(p, x, 5.7112963590585538103336e1);
    p = fma(p, x, 2.0039553499201281259648e1);
    double q = x + 1.5062909083469192043167e1;
    q = fma(q, x, 8.3047565967967209469434e1);
    q = fma(q, x, 2.2176239823732856465394e2);
    q = fma(q, x, 3.0909872225312059774938e2);
    q = fma(q, x, 2.1642788614495947685003e2);
    q = fma(q, x, 6.0118660497603843919306e1);
    double small = x + fma(-0.5, x2, (x * x2) * (p / q));
    return fabs(x) < 0.41421356237309504880 ? small : log(x + 1.0);
}
static inline double hf_tanh_f64(double x) { return tanh(x); }
static inline double hf_logistic_f64(double x)
{
    double e = exp(-fabs(x));
    return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}
static inline double hf_sqrt_f64(double x) { return __builtin_sqrt(x); }
static inline double hf_rsqrt_f64(double x) { return 1.0 / __builtin_sqrt(x); }
static inline double hf_cbrt_f64(double x) { return cbrt(x); }
static inline double hf_pow_f64(double x, double y) { return pow(x, y); }
/* hf_pow_xla_f32 for f64: a subnormal exponent acts as +-2^-1022, a subnormal base as
   +-2^-1075 = +-2^-1022 * 2^-53 (when the first factor's power underflows, so does the result,
   which the file flushes). */
static inline double hf_pow_xla_f64(double x, double y)
{
#if HF_FLUSH_SUBNORMALS
    uint64_t ux = hf__as_u64(x), uy = hf__as_u64(y);
    const uint64_t mag = 0x7fffffffffffffffull, small = 0x000fffffffffffffull;
    if (((uy & mag) - 1u) < small) y = (uy >> 63) ? -0x1p-1022 : 0x1p-1022;
    if (((ux & mag) - 1u) < small)
        return pow((ux >> 63) ? -0x1p-1022 : 0x1p-1022, y) * pow(0x1p-53, y);
#endif
    return pow(x, y);
}
static inline double hf_atan2_f64(double y, double x) { return atan2(y, x); }
static inline double hf_erf_f64(double x) { return erf(x); }
#endif /* HF_MATHLIB_INCLUDED */
"""


def _erf_horner() -> str:
    """Horner's rule on the coefficients of interval i (1..7), each chosen by selects rather
    than loaded from a table: a table load needs a gather, which keeps GCC from vectorizing
    the function on AVX2."""
    def coef(j: int) -> str:
        expr = _hex(_ERF_TABLE[6 * 12 + j])
        for i in range(6, 0, -1):
            expr = f"hf__seld(i == {i}, {_hex(_ERF_TABLE[(i - 1) * 12 + j])}, {expr})"
        return expr

    lines = [f"double big = {coef(11)};"]
    lines += [f"big = HF_FMA(big, t, {coef(j)});" for j in range(10, -1, -1)]
    return "\n    ".join(lines)


def source() -> str:
    """The C text of the library (include once per translation unit; guarded)."""
    subs = {
        "@EXPM1@": _horner("r", _EXPM1),
        "@LOG@": _horner("w", _LOG),
        "@ATAN@": _horner("w", _ATAN),
        "@SIN@": _horner("w", _SIN),
        "@COS@": _horner("w", _COS),
        "@ERF_SMALL@": _horner("w", _ERF_SMALL),
        "@ERF_HORNER@": _erf_horner(),
        "@INV_PIO4@": ", ".join(f"0x{v:08x}u" for v in _INV_PIO4),
    }
    text = _PRELUDE + _CORE + _F32 + vmath.scalar() + _F64
    for key, value in subs.items():
        text = text.replace(key, value)
    return text


def harness_source() -> str:
    """C text exporting array wrappers for measuring the library: for each opcode's f32/f64
    function NAME, `void NAME_array(const T *a, [const T *b,] T *out, int64_t n)`."""
    lines = [source()]
    for op, names in FUNCTIONS.items():
        for name, ty in zip(names, ("float", "double")):
            if op in BINARY:
                lines.append(
                    f"void {name}_array(const {ty} *a, const {ty} *b, {ty} *out, int64_t n)"
                    f" {{ for (int64_t i = 0; i < n; i++) out[i] = {name}(a[i], b[i]); }}"
                )
            else:
                lines.append(
                    f"void {name}_array(const {ty} *a, {ty} *out, int64_t n)"
                    f" {{ for (int64_t i = 0; i < n; i++) out[i] = {name}(a[i]); }}"
                )
    return "\n".join(lines) + "\n"


# ----- measurement (used by tests/test_cpu_mathlib.py and scripts/mathlib_ulp.py) ------------


def _erf64(x: np.ndarray) -> np.ndarray:
    try:
        from scipy import special

        return np.asarray(special.erf(x), dtype=np.float64)
    except ImportError:
        return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def _logistic64(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_REFERENCE: dict[str, Callable[..., np.ndarray]] = {
    "sine": np.sin,
    "cosine": np.cos,
    "tan": np.tan,
    "exponential": np.exp,
    "exponential-minus-one": np.expm1,
    "log": np.log,
    "log-plus-one": np.log1p,
    "tanh": np.tanh,
    "logistic": _logistic64,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "cbrt": np.cbrt,
    "power": np.power,
    "atan2": np.arctan2,
    "erf": _erf64,
}


def reference(op: str, *xs: np.ndarray) -> np.ndarray:
    """The float64 reference (what the interpreter computes before rounding) of `op`."""
    with np.errstate(all="ignore"):
        return _REFERENCE[op](*(np.asarray(x, dtype=np.float64) for x in xs))


def ulp_error(ours: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    """|ours - ref| in f32 ulps of the float64 reference (ulp = 2^(e-23) for ref in [2^e, 2^(e+1)),
    at least 2^-149). Where the reference rounds to inf or nan in f32, the error is 0 if `ours`
    is that same value, else inf; a nan or an inf from us where the reference is finite is inf."""
    ref32 = ref64.astype(np.float32)
    _, e = np.frexp(ref64)
    ulp = np.ldexp(1.0, np.maximum(e.astype(np.int64) - 24, -149))
    with np.errstate(all="ignore"):
        err = np.abs(ours.astype(np.float64) - ref64) / ulp
    special = ~np.isfinite(ref32)
    same = (ours == ref32) | (np.isnan(ours) & np.isnan(ref32))
    err = np.where(special, np.where(same, 0.0, np.inf), err)
    return np.where(np.isnan(err), np.inf, err)


def call_array(lib: Any, name: str, *xs: np.ndarray) -> np.ndarray:
    """Run `NAME_array` of a library built from `harness_source()` over contiguous arrays."""
    out = np.empty_like(xs[0])
    args = [x.ctypes.data_as(ctypes.c_void_p) for x in xs]
    getattr(lib, name + "_array")(
        *args, out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(out.size)
    )
    return out
