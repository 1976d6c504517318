"""C text of the functions XLA's CPU takes from the C library and whose results under DAZ
depend on the operands' bits, plus XLA's complex power formula built on them: appended to the
prelude after mathlib (`cexpr.prelude`), whose `hf__*` helpers and f32 functions they use.

    hf_atan2_xla_f32 / _f64    real atan2 (glibc's atan2f / atan2 under DAZ)
    hf_cbrt_xla_f32            real cbrt of f32 / bf16 (a subnormal gives XLA's constant)
    hf_sub_or_f32 / _f64       a subnormal operand as the result (sin, tan, tanh, expm1)
    hf_cpow_xla_c64 / _c128    complex power (XLA's `EmitComplexPower`)

Each matches the interpreter bit for bit on special values (NaN, infinities, zeros and their
signs) and to a few ulp elsewhere: `interpreter/flush.py` `daz_atan2` and `_complex_power_step`,
`interpreter/numerics.py` `complex_power`. Conditions enforced:
- The operands are taken unflushed; when the file keeps subnormals (`HF_FLUSH_SUBNORMALS` 0)
  the functions are IEEE atan2 and the same complex formula without any flushing.
- atan2 where an operand is subnormal: f32: atan2(y, 1) = y unchanged, y over +-0 is +-pi/2,
  two subnormals are NaN, a normal y over a subnormal x is pi/2 (or 0x3fc90fda for x < 0) with
  y's sign; f64: y nonzero by its bits over a subnormal or zero x is +-pi/2, a subnormal y over
  x <= -2^-966 is -pi whatever y's sign; otherwise the flushed operands' atan2.
- cbrt (f32, bf16 computed as f32) of a nonzero subnormal of either sign is the constant
  -5.595173541877215e-16 (0xa6214518), as jax.jit gives (`daz_cbrt`); else mathlib's cbrt.
- sin, tan, expm1 (and f32 tanh) of a subnormal return it unflushed (`subnormals.PASSTHROUGH`,
  interpreter/flush.py `_passthrough_step`): `hf_sub_or_*(x, f(flushed x))`.
- complex power computes in the component type (c64: f32 steps, so |1e20|^2 overflows; its
  pow, exp, log, cos and sin in double, rounded to float once, as the interpreter's):
  |a|^c * exp(-d arg a) * (cos q + i sin q), q = c arg a + d log|a|, |a| = max * sqrt(1 +
  (min/max)^2) (min where that is NaN), arg a = atan2 of the unflushed parts, everything else
  on flushed parts; then XLA's cut-offs: |a| = 0, real b >= 0: 1 or 0; b = 0: 1; a = 1: 1;
  a = inf + 0j, real b: inf (c > 0) or 0 (c < 0).
"""

from __future__ import annotations

_ATAN2 = r"""
/* atan2 as XLA's CPU computes it (interpreter/flush.py `daz_atan2`): when this file flushes
   subnormals, glibc's atan2f tests NaNs, zeros, infinities and x = 1 by the bits and divides
   under DAZ. Where an operand is subnormal: atan2(y, 1) = y unchanged; atan2(sub, +-0) =
   +-pi/2; both subnormal: NaN; a normal y over a subnormal x: pi/2, or pi - (pi/2 - pi_lo)
   (0x3fc90fda) for a negative x, with y's sign; otherwise the flushed operands' atan2.
   Takes the operands unflushed; bit tests and selects only. */
HF_INLINE float hf_atan2_xla_f32(float y, float x)
{
#if HF_FLUSH_SUBNORMALS
    uint32_t ux = hf__as_u32(x), uy = hf__as_u32(y);
    uint32_t ax = ux & 0x7fffffffu, ay = uy & 0x7fffffffu;
    int sx = (ax - 1u) < 0x007fffffu, sy = (ay - 1u) < 0x007fffffu;
    float fx = hf__self(sx, copysignf(0.0f, x), x), fy = hf__self(sy, copysignf(0.0f, y), y);
    float r = hf_atan2_f32(fy, fx);
    float half = copysignf(0x1.921fb6p+0f, y);                       /* 0x3fc90fdb */
    float half_neg = copysignf(0x1.921fb4p+0f, y);                   /* 0x3fc90fda */
    r = hf__self(sy & (ax == 0u), half, r);
    r = hf__self(sx & !sy & (ay != 0u) & (ay < 0x7f800000u), (ux >> 31) ? half_neg : half, r);
    r = hf__self(sx & sy, NAN, r);
    return hf__self(sy & (ux == 0x3f800000u), y, r);
#else
    return hf_atan2_f32(y, x);
#endif
}

/* hf_atan2_xla_f32 for f64 (glibc's atan2 under DAZ): y nonzero by its bits over a subnormal
   or zero x is +-pi/2 (glibc tests x == 0); a subnormal y over a negative x with |x| >= 2^-966
   is -pi whatever y's sign (glibc's y > 0 ? pi : -pi); otherwise the flushed operands'. */
static inline double hf_atan2_xla_f64(double y, double x)
{
#if HF_FLUSH_SUBNORMALS
    uint64_t ux = hf__as_u64(x), uy = hf__as_u64(y);
    const uint64_t mag = 0x7fffffffffffffffull, small = 0x000fffffffffffffull;
    const uint64_t inf = 0x7ff0000000000000ull;
    uint64_t ax = ux & mag, ay = uy & mag;
    int sx = (ax - 1u) < small, sy = (ay - 1u) < small;
    if (ax > inf || ay > inf) return x + y;
    if (ay != 0u && (sx || ax == 0u)) return copysign(0x1.921fb54442d18p+0, y);
    if (sy && (ux >> 63) && ax < inf && (ax >> 52) >= 57u) return -0x1.921fb54442d18p+1;
    return atan2(sy ? copysign(0.0, y) : y, sx ? copysign(0.0, x) : x);
#else
    return atan2(y, x);
#endif
}
"""

_CPOW = r"""
/* a subnormal part read as a zero of its sign when the file flushes (as DAZ reads it) */
HF_INLINE float hf__daz_f32(float x)
{
#if HF_FLUSH_SUBNORMALS
    return hf__self(((hf__as_u32(x) & 0x7fffffffu) - 1u) < 0x007fffffu, copysignf(0.0f, x), x);
#else
    return x;
#endif
}
static inline double hf__daz_f64(double x)
{
#if HF_FLUSH_SUBNORMALS
    uint64_t m = hf__as_u64(x) & 0x7fffffffffffffffull;
    return (m - 1u) < 0x000fffffffffffffull ? copysign(0.0, x) : x;
#else
    return x;
#endif
}
/* XLA's complex power in f32 (the module docstring) */
static inline float _Complex hf_cpow_xla_c64(float _Complex x, float _Complex y)
{
    float arg = hf_atan2_xla_f32(__imag__ x, __real__ x);
    float a = hf__daz_f32(__real__ x), b = hf__daz_f32(__imag__ x);
    float c = hf__daz_f32(__real__ y), d = hf__daz_f32(__imag__ y);
    float aa = fabsf(a), ab = fabsf(b), zero = 0, one = 1, inf = (float)INFINITY;
    int anan = (a != a) | (b != b);
    float big = anan ? (float)NAN : (aa > ab ? aa : ab);
    float small = anan ? (float)NAN : (aa < ab ? aa : ab);
    float ratio = small / big;
    float mag = big * sqrtf(one + ratio * ratio);
    mag = mag != mag ? small : mag;
    float coeff = (float)pow(mag, c) * (float)exp((double)(-d * arg));
    float q = c * arg + d * (float)log(mag);
    float re = coeff * (float)cos(q), im = coeff * (float)sin(q);
    if (mag == zero && d == zero && c >= zero) { re = c == zero ? one : zero; im = zero; }
    if ((c == zero && d == zero) || (a == one && b == zero)) { re = one; im = zero; }
    if (a == inf && b == zero && d == zero && c > zero) { re = inf; im = zero; }
    if (a == inf && b == zero && d == zero && c < zero) { re = zero; im = zero; }
    return __builtin_complex(re, im);
}
/* XLA's complex power in f64 (the module docstring) */
static inline double _Complex hf_cpow_xla_c128(double _Complex x, double _Complex y)
{
    double arg = hf_atan2_xla_f64(__imag__ x, __real__ x);
    double a = hf__daz_f64(__real__ x), b = hf__daz_f64(__imag__ x);
    double c = hf__daz_f64(__real__ y), d = hf__daz_f64(__imag__ y);
    double aa = fabs(a), ab = fabs(b), zero = 0, one = 1, inf = (double)INFINITY;
    int anan = (a != a) | (b != b);
    double big = anan ? (double)NAN : (aa > ab ? aa : ab);
    double small = anan ? (double)NAN : (aa < ab ? aa : ab);
    double ratio = small / big;
    double mag = big * sqrt(one + ratio * ratio);
    mag = mag != mag ? small : mag;
    double coeff = pow(mag, c) * exp(-d * arg);
    double q = c * arg + d * log(mag);
    double re = coeff * cos(q), im = coeff * sin(q);
    if (mag == zero && d == zero && c >= zero) { re = c == zero ? one : zero; im = zero; }
    if ((c == zero && d == zero) || (a == one && b == zero)) { re = one; im = zero; }
    if (a == inf && b == zero && d == zero && c > zero) { re = inf; im = zero; }
    if (a == inf && b == zero && d == zero && c < zero) { re = zero; im = zero; }
    return __builtin_complex(re, im);
}
"""


_CBRT = r"""
/* cbrt as XLA's CPU computes it under DAZ (interpreter/flush.py `daz_cbrt`, measured): every
   nonzero subnormal f32 of either sign gives -5.595173541877215e-16 (0xa6214518); the rest is
   mathlib's cbrt. Takes the operand unflushed; a bit test and selects only. */
HF_INLINE float hf_cbrt_xla_f32(float x)
{
#if HF_FLUSH_SUBNORMALS
    uint32_t ax = hf__as_u32(x) & 0x7fffffffu;
    int sub = (ax - 1u) < 0x007fffffu;
    return hf__self(sub, hf__as_f32(0xa6214518u), hf_cbrt_f32(hf__self(sub, 0.0f, x)));
#else
    return hf_cbrt_f32(x);
#endif
}
"""


_SUB_OR = r"""
/* x itself where it is subnormal and this file flushes subnormals, else r: XLA's CPU sin, tan,
   expm1 (and f32 tanh) return a subnormal operand unflushed (subnormals.PASSTHROUGH). */
HF_INLINE float hf_sub_or_f32(float x, float r)
{
#if HF_FLUSH_SUBNORMALS
    return hf__self(((hf__as_u32(x) & 0x7fffffffu) - 1u) < 0x007fffffu, x, r);
#else
    (void)x;
    return r;
#endif
}
static inline double hf_sub_or_f64(double x, double r)
{
#if HF_FLUSH_SUBNORMALS
    return ((hf__as_u64(x) & 0x7fffffffffffffffull) - 1u) < 0x000fffffffffffffull ? x : r;
#else
    (void)x;
    return r;
#endif
}
"""


def source() -> str:
    """The C text (after mathlib's)."""
    return _ATAN2 + _CBRT + _SUB_OR + _CPOW
