"""C helpers for the element types beyond the byte-sized integers and IEEE floats, and for
mulhi: part of the prelude (`cprelude.helpers`), used by `cexpr_types`. Each matches the
interpreter (`backends/interpreter/numerics.py`, `conversions.py`) bit for bit, except where
said.

- `hf_mulhi_<int>`: the high half of the double-width product (`__int128` for 64 bits).
- 8- and 4-bit floats (`hf_<fmt>_to_f64`, `hf_f64_to_<fmt>`): loading reads a table of every
  encoding's value made from ml_dtypes (exact, NaNs included); storing rounds a double to nearest
  even on the encoding, with each format's rules for what does not fit: IEEE-like formats (e5m2,
  e4m3, e3m4) overflow to inf and keep the NaN sign; `fn` formats send overflow and inf to NaN
  (S.1111.111); `fnuz` formats have one NaN (0x80) and no -0; e8m0 (exponent only, unsigned)
  rounds the f32 value's exponent half up on the top mantissa bit, and sends zero, negatives, inf
  and overflow to NaN (0xff); f4e2m1fn saturates at +-6 and sends NaN to -0 (+NaN) or +0
  (-NaN), as ml_dtypes does. Values go through double, so an op computed in float and rounded
  here is rounded once (24 > 2 * 4 + 2 bits: double rounding is innocuous).
- complex (C99 `_Complex`; the parts are `__real__` / `__imag__`): multiplication by the naive
  formula and division by Smith's method with XLA's recovery of a NaN+NaNj result (zero or
  infinite divisor, infinite numerator: `interpreter/numerics.complex_divide`), both XLA's steps
  contracted to fused multiply-adds in the component type (c64 in float); abs is
  `hypot`; sign is each part divided by `|z|` (0 for 0), as XLA's; rsqrt is XLA's polar form
  (`interpreter/numerics.complex_rsqrt`); expm1 and log1p are numpy's
  formulas; power is XLA's formula in the component type (`daz_math.py`, after mathlib in the
  prelude); the other functions are the C library's (`cexp`, `ctan`, ...): within a few
  ulp of numpy's.
- `hf_stochastic_round(x, random, bits)`: stochastic-convert's rounding of the magnitude (up
  when `random` is below the fraction scaled to `bits` bits), as a double for a saturating
  convert (NaN stays NaN: it converts to 0).
- `hf_small_key`: the total order of an 8- or 4-bit float from its encoding (sign-magnitude;
  e8m0 is unsigned; the fnuz NaN, -0's encoding, lowest), as the interpreter's `total_order_key`.
"""

from __future__ import annotations

import functools

import numpy as np

from hlofuse.ir.dtypes import DTYPES

_MULHI = r"""
static inline IT hf_mulhi_ISFX(IT a, IT b) { return (IT)(((WT)a * (WT)b) >> NBITS); }
"""

_INTS = {"s8": ("int8_t", 8), "s16": ("int16_t", 16), "s32": ("int32_t", 32),
         "s64": ("int64_t", 64), "u8": ("uint8_t", 8), "u16": ("uint16_t", 16),
         "u32": ("uint32_t", 32), "u64": ("uint64_t", 64)}


def _mulhi() -> str:
    out = []
    for name, (ct, bits) in _INTS.items():
        signed = name[0] == "s"
        wide = ("__int128" if signed else "unsigned __int128") if bits == 64 else (
            "int64_t" if signed else "uint64_t")
        text = _MULHI.replace("NBITS", str(bits)).replace("ISFX", name)
        out.append(text.replace("IT", ct).replace("WT", wide))
    return "".join(out)


# ----- 8- and 4-bit floats -------------------------------------------------------------------

SMALL_FLOATS = ("f8e5m2", "f8e4m3", "f8e3m4", "f8e4m3fn", "f8e4m3fnuz", "f8e5m2fnuz",
                "f8e4m3b11fnuz", "f8e8m0fnu", "f4e2m1fn")
_BIAS = {"f8e4m3fnuz": 8, "f8e5m2fnuz": 16, "f8e4m3b11fnuz": 11}

_TO_SMALL = r"""
static inline uint8_t hf_f64_to_NAME_k(double x, int keep) {
  uint32_t sign = SIGNED && signbit(x) ? SIGN : 0u;
  double a = fabs(x);
  if (a != a) return keep && HF_SMALL_TAGGED(x) ? HF_SMALL_TAG(x) : NANCODE;
  if (a > MAXVAL_AND_MORE) return OVERFLOW;
  double enc;
  if (a < MINNORM) {
    enc = rint(a * SUBSCALE);
  } else {
    int e;
    double m = frexp(a, &e);
    enc = ROUND((double)(e - 1 + BIAS) * MSCALE + (2.0 * m - 1.0) * MSCALE);
  }
  if (enc > MAXENC) return OVERFLOW;
  uint32_t r = (uint32_t)enc;
  return (uint8_t)(NOZERO r | sign);
}
static inline uint8_t hf_f64_to_NAME(double x) { return hf_f64_to_NAME_k(x, 1); }
static inline float hf_round_NAME(double x) {
  return (float)hf_NAME_to_f64(hf_f64_to_NAME_k(x, 0));
}
"""

_TO_E8M0 = r"""
static inline uint8_t hf_f64_to_f8e8m0fnu_k(double x, int keep) {
  if (x != x && keep && HF_SMALL_TAGGED(x)) return HF_SMALL_TAG(x);
  /* as ml_dtypes, on the f32 bits: the exponent field, plus one when the top mantissa bit is
     set (round half up); an f32 subnormal gives 1 above 2^-127, else 0; zero, negatives, inf,
     NaN and overflow are NaN */
  uint32_t b = hf_f32_bits((float)x);
  uint32_t e = (b >> 23) & 0xffu, m = b & 0x7fffffu;
  uint32_t enc = e ? e + (m >> 22) : (uint32_t)(m > 0x400000u);
  if ((b & 0x7fffffffu) == 0u || (b >> 31) || e == 0xffu || enc > 254u) return 0xffu;
  return (uint8_t)enc;
}
static inline uint8_t hf_f64_to_f8e8m0fnu(double x) { return hf_f64_to_f8e8m0fnu_k(x, 1); }
/* Load and store through f32 bits: the smallest value 2^-127 (encoding 0) is an f32 subnormal,
   which a float conversion would flush under FTZ/DAZ (fpenv.py); copies, slices and
   bitcast-converts must keep its byte. A subnormal stored is therefore read by its bits. */
static inline float hf_f8e8m0fnu_to_f32(uint8_t b) {
  return b == 0xffu ? (float)hf_tab_f8e8m0fnu[0xff]
                    : hf_f32_from_bits(b ? (uint32_t)b << 23 : 0x00400000u);
}
static inline uint8_t hf_f32_to_f8e8m0fnu(float x) {
  uint32_t b = hf_f32_bits(x);
  if (b != 0u && b < 0x00800000u) return (uint8_t)(b > 0x00400000u);
  return hf_f64_to_f8e8m0fnu((double)x);
}
/* an e8m0 compute value (f32) to double, 2^-127 included (a conversion reads it as 0 under DAZ) */
static inline double hf_f8e8m0fnu_f32_to_f64(float x) {
  return hf_f32_bits(x) == 0x00400000u ? 0x1p-127 : (double)x;
}
/* convert from an f32 compute value (f32, bf16, f16, 8-bit floats), by its bits as XLA */
static inline float hf_round_f8e8m0fnu_f32(float x) {
  uint32_t b = hf_f32_bits(x);
  uint8_t c = (b != 0u && b < 0x00800000u) ? (uint8_t)(b > 0x00400000u)
                                           : hf_f64_to_f8e8m0fnu_k((double)x, 0);
  return hf_f8e8m0fnu_to_f32(c);
}
static inline float hf_round_f8e8m0fnu(double x) {
  return (float)hf_f8e8m0fnu_to_f64(hf_f64_to_f8e8m0fnu_k(x, 0));
}
/* an e8m0 op's result (computed in float, as XLA upcasts e8m0 ops to f32) rounded by its f32
   bits: abs / max / select of 2^-127 keep the f32 subnormal, which a conversion to double reads
   as 0 under DAZ (NaN in e8m0); a double result rounds as before */
#define hf_round_f8e8m0fnu_op(x) \
  _Generic((x), float: hf_round_f8e8m0fnu_f32, default: hf_round_f8e8m0fnu)(x)
/* e8m0 arithmetic (cexpr_e8m0.py): 2^-127 read as 2^-126 by the ops XLA's CPU computes on it
   unflushed (ceil, floor, roundings, sign: the same results for both); whether a compute value
   is 2^-127; an exact result (double) as f32 holds it, subnormals kept, then by its bits */
static inline float hf_f8e8m0fnu_unflush(float x) {
  return hf_f32_bits(x) == 0x00400000u ? 0x1p-126f : x;
}
static inline int hf_f8e8m0fnu_is_min(float x) { return hf_f32_bits(x) == 0x00400000u; }
static inline float hf_round_f8e8m0fnu_exact(double x) {
  if (x > 0.0 && x < 0x1p-126) {
    double m = rint(x * 0x1p149);
    return hf_f8e8m0fnu_to_f32(m == 0.0 ? 0xffu : m > 0x1p22 ? 1u : 0u);
  }
  return hf_f8e8m0fnu_to_f32(hf_f64_to_f8e8m0fnu_k(x, 0));
}
/* convert from f64 as XLA's CPU does when flushing (measured against jax.jit): below 2^-126,
   2^-127 exactly is encoding 0, anything between it and 2^-126 encoding 1, anything smaller
   (zero included) NaN; interpreter/conversions.py `f64_to_e8m0` */
static inline float hf_round_f8e8m0fnu_f64(double x) {
#if HF_FLUSH_SUBNORMALS
  if (x < 0x1p-126 && x > -0x1p-126)
    return hf_f8e8m0fnu_to_f32(x == 0x1p-127 ? 0u : x > 0x1p-127 ? 1u : 0xffu);
#endif
  return hf_round_f8e8m0fnu(x);
}
"""

# A NaN encoding loads as a NaN whose payload names it (bits 29..37 of the double, which
# survive the conversion to float: 0x100 | encoding), so a value stored unchanged (copy, select,
# bitcast-convert) keeps its encoding; every op rounds through `hf_round_<fmt>`, which ignores
# the tag and gives the format's canonical NaN, as ml_dtypes does.
_TAG = r"""
static inline uint32_t hf_small_payload(double x) {
  uint64_t b = hf_f64_bits(x);
  return (uint32_t)((b >> 29) & 0x3fffffu);
}
#define HF_SMALL_TAGGED(x) ((hf_small_payload(x) & ~0xffu) == 0x100u)
#define HF_SMALL_TAG(x) ((uint8_t)(hf_small_payload(x) & 0xffu))
"""


def _hex(x: float) -> str:
    return float(x).hex()


def _small_float(name: str) -> str:
    dt = DTYPES[name]
    fmt = dt.float_format
    e_bits, m_bits = fmt.exponent_bits, fmt.mantissa_bits
    codes = np.arange(1 << dt.bits, dtype=np.uint8)
    values = codes.view(dt.np).astype(np.float64)
    table = ", ".join(_c_double(v, int(c)) for v, c in zip(values, codes, strict=True))
    load = (f"__attribute__((unused)) static const double hf_tab_{name}[{1 << dt.bits}] = "
            f"{{{table}}};\n"
            f"static inline double hf_{name}_to_f64(uint8_t b) "
            f"{{ return hf_tab_{name}[b & {(1 << dt.bits) - 1}u]; }}\n")
    if name == "f8e8m0fnu":
        return load + _TO_E8M0
    bias = _BIAS.get(name, (1 << (e_bits - 1)) - 1)
    finite = values[np.isfinite(values)]
    max_val = float(finite.max())
    max_enc = int(codes[values == max_val][0])
    sign = 1 << (dt.bits - 1)
    if name == "f4e2m1fn":
        nan, nozero = "(uint8_t)(signbit(x) ? 0u : 8u)", ""
        overflow = f"(uint8_t)({max_enc}u | sign)"
    elif name.endswith("fnuz"):
        nan, overflow, nozero = "0x80u", "0x80u", "r == 0u ? 0u : "
    elif name.endswith("fn"):
        nan = overflow = f"(uint8_t)({sign - 1}u | sign)"
        nozero = ""
    else:  # IEEE-like: inf, and a quiet NaN with the sign
        inf_enc = ((1 << e_bits) - 1) << m_bits
        nan = f"(uint8_t)({inf_enc | (1 << (m_bits - 1))}u | sign)"
        overflow, nozero = f"(uint8_t)({inf_enc}u | sign)", ""
    subs = {
        "NAME": name, "SIGNED": "1", "SIGN": f"{sign}u", "NANCODE": nan, "OVERFLOW": overflow,
        "MAXVAL_AND_MORE": _hex(max_val * 4), "MINNORM": _hex(2.0 ** (1 - bias)),
        "SUBSCALE": _hex(2.0 ** (bias - 1 + m_bits)), "BIAS": str(bias),
        "MSCALE": _hex(2.0 ** m_bits), "MAXENC": f"{max_enc}.0", "NOZERO": nozero,
        "ROUND": "rint",
    }
    text = _TO_SMALL
    for key in sorted(subs, key=len, reverse=True):
        text = text.replace(key, subs[key])
    return load + text


def _c_double(v: float, code: int = 0) -> str:
    if np.isnan(v):  # tagged with its encoding (_TAG)
        nan = f'__builtin_nan("{(0x100 | code) << 29:#x}")'
        return f"(-{nan})" if np.signbit(v) else nan
    if np.isinf(v):
        return "(-__builtin_inf())" if v < 0 else "__builtin_inf()"
    return _hex(v)


# ----- complex -------------------------------------------------------------------------------

_COMPLEX_CORE = r"""
typedef float _Complex hf_c64;
typedef double _Complex hf_c128;
static inline double hf_cunit(double v) { return copysign(isinf(v) ? 1.0 : 0.0, v); }
static inline hf_c128 hf_cdiv_recover(double ar, double ai, double br, double bi, double r,
                                      double i);
static inline hf_c128 hf_cdiv_c128(hf_c128 a, hf_c128 b) {
  double ar = __real__ a, ai = __imag__ a, br = __real__ b, bi = __imag__ b, r, i;
  double abr = fabs(br), abi = fabs(bi);
  if (abr >= abi) {  /* XLA's steps, fused (numerics.complex_divide) */
    double rat = bi / br, den = fma(bi, rat, br);  /* divided, as XLA: 1 / den may be subnormal */
    r = fma(ai, rat, ar) / den; i = fma(-ar, rat, ai) / den;
  } else {
    double rat = br / bi, den = fma(br, rat, bi);
    r = fma(ar, rat, ai) / den; i = fma(ai, rat, -ar) / den;
  }
  return hf_cdiv_recover(ar, ai, br, bi, r, i);
}
static inline hf_c64 hf_cdiv_c64(hf_c64 a, hf_c64 b) {  /* in f32: steps overflow at 2^128 */
  float ar = __real__ a, ai = __imag__ a, br = __real__ b, bi = __imag__ b, r, i;
  if (fabsf(br) >= fabsf(bi)) {
    float rat = bi / br, den = fmaf(bi, rat, br);
    r = fmaf(ai, rat, ar) / den; i = fmaf(-ar, rat, ai) / den;
  } else {
    float rat = br / bi, den = fmaf(br, rat, bi);
    r = fmaf(ar, rat, ai) / den; i = fmaf(ai, rat, -ar) / den;
  }
  hf_c128 w = hf_cdiv_recover(ar, ai, br, bi, r, i);
  return __builtin_complex((float)__real__ w, (float)__imag__ w);
}
static inline hf_c128 hf_cdiv_recover(double ar, double ai, double br, double bi, double r,
                                      double i) {
  double abr = fabs(br), abi = fabs(bi);
  if (isnan(r) && isnan(i)) {  /* XLA's recovery (C99 Annex G), as jax.jit */
    int fin_a = fabs(ar) < __builtin_inf() && fabs(ai) < __builtin_inf();
    int fin_b = fabs(br) < __builtin_inf() && fabs(bi) < __builtin_inf();
    if (abr == 0 && abi == 0 && !(isnan(ar) && isnan(ai))) {  /* (1+1j)/(-0-0j) = -inf-infj */
      double inf = copysign(__builtin_inf(), br);
      r = inf * ar; i = inf * ai;
    } else if ((isinf(ar) || isinf(ai)) && fin_b) {
      double ur = hf_cunit(ar), ui = hf_cunit(ai);
      r = __builtin_inf() * (ur * br + ui * bi); i = __builtin_inf() * (ui * br - ur * bi);
    } else if ((isinf(br) || isinf(bi)) && fin_a) {  /* 1 / (inf+infj) = 0 */
      double ur = hf_cunit(br), ui = hf_cunit(bi);
      r = 0.0 * (ar * ur + ai * ui); i = 0.0 * (ai * ur - ar * ui);
    }
  }
  return __builtin_complex(r, i);
}
static inline hf_c128 hf_cmul_c128(hf_c128 a, hf_c128 b) {  /* XLA's, fused (numerics.py) */
  double ar = __real__ a, ai = __imag__ a, br = __real__ b, bi = __imag__ b;
  return __builtin_complex(fma(ar, br, -(ai * bi)), fma(ai, br, ar * bi));
}
static inline hf_c64 hf_cmul_c64(hf_c64 a, hf_c64 b) {  /* in f32: products overflow at 2^128 */
  float ar = __real__ a, ai = __imag__ a, br = __real__ b, bi = __imag__ b;
  return __builtin_complex(fmaf(ar, br, -(ai * bi)), fmaf(ai, br, ar * bi));
}
static inline hf_c128 hf_csign_c128(hf_c128 z) {
  double m = hypot(__real__ z, __imag__ z);
  /* each part divided by |z|, as XLA's elemental sign: a complex division by m + 0j would
     underflow 1 / m (0 + 1e308j gave 0 under FTZ) and loses the sign of a zero part */
  return m == 0 ? z : __builtin_complex(__real__ z / m, __imag__ z / m);
}
static inline hf_c128 hf_cexpm1_c128(hf_c128 z) {
  double x = __real__ z, y = __imag__ z, a = sin(y / 2);
  if (y == 0)  /* XLA: a real operand stays real (expm1(inf + 0i) = inf + 0i, not inf*0 = NaN) */
    return __builtin_complex(expm1(x) + 0.0, 0.0);
  return __builtin_complex(expm1(x) * cos(y) - 2 * a * a, exp(x) * sin(y));
}
static inline hf_c128 hf_clog1p_c128(hf_c128 z) {
  double x = __real__ z + 1, y = __imag__ z;
  return __builtin_complex(log(hypot(x, y)), atan2(y, x));
}
static inline hf_c128 hf_crsqrt_at(hf_c128 z, double t) {  /* XLA's polar form (numerics.py) */
  double a = __real__ z, b = __imag__ z, aa = fabs(a), ab = fabs(b);
  int nan = isnan(aa) || isnan(ab);
  double hi = nan ? __builtin_nan("") : fmax(aa, ab), lo = nan ? __builtin_nan("") : fmin(aa, ab);
  double q = lo / hi, r = (1.0 / sqrt(hi)) * (1.0 / sqrt(sqrt(1.0 + q * q)));
  if (isnan(r)) r = 1.0 / sqrt(lo);
  t *= -0.5;
  double re = r * cos(t), im = r * sin(t);
  if ((isinf(b) && isnan(a)) || isinf(a)) { re = copysign(0.0, a); im = -copysign(0.0, b); }
  if (a == 0 && b == 0) { re = __builtin_inf(); im = __builtin_nan(""); }
  return __builtin_complex(re, im);
}
static inline hf_c128 hf_crsqrt_c128(hf_c128 z) {
  return hf_crsqrt_at(z, atan2(__imag__ z, __real__ z));
}
static inline hf_c128 hf_clogistic_c128(hf_c128 z) {
  return hf_cdiv_c128(__builtin_complex(1.0, 0.0), __builtin_complex(1.0, 0.0) + cexp(-z));
}
static inline hf_c128 hf_ctan_c128(hf_c128 z) {  /* XLA: tan(inf/NaN +- 0 i) = NaN + NaN i */
  if (__imag__ z == 0 && !isfinite(__real__ z))
    return __builtin_complex(__builtin_nan(""), __builtin_nan(""));
  return ctan(z);
}
static inline hf_c128 hf_ctanh_c128(hf_c128 z) {  /* XLA: tanh(+-0 + i inf/NaN) = NaN + NaN i */
  if (__real__ z == 0 && !isfinite(__imag__ z))
    return __builtin_complex(__builtin_nan(""), __builtin_nan(""));
  return ctanh(z);
}
static inline double hf_stochastic_round(double x, uint64_t r, int bits) {
  double m = fabs(x), fl = floor(m);
  double scaled = floor((m - fl) * ldexp(1.0, bits));
  double v = fl + (isfinite(scaled) && (double)r < scaled ? 1.0 : 0.0);
  return x < 0 ? -v : v;
}
static inline int32_t hf_small_key(uint32_t e, int bits, int has_sign) {
  uint32_t mag = e & ((1u << (bits - 1)) - 1u);
  if (!has_sign) return (int32_t)e;
  if (has_sign == 2 && e == (1u << (bits - 1)))  /* fnuz: the NaN (-0's encoding) is lowest */
    return -(int32_t)(1u << (bits - 1)) - 1;
  return (e >> (bits - 1)) & 1u ? -(int32_t)mag - 1 : (int32_t)mag;
}
static inline hf_c64 hf_c64_of(hf_c128 z) {
  return __builtin_complex((float)__real__ z, (float)__imag__ z);
}
static inline hf_c64 hf_crsqrt_c64(hf_c64 z) {  /* the argument by atan2f, as XLA's c64 */
  return hf_c64_of(hf_crsqrt_at((hf_c128)z, (double)atan2f(__imag__ z, __real__ z)));
}
static inline hf_c64 hf_csign_c64(hf_c64 z) {
  double re = __real__ z, im = __imag__ z;
  double m = (double)(float)hypot(re, im);  /* |z| rounded to f32 first, as XLA's */
  return m == 0 ? __builtin_complex(hf_ftz_f32(__real__ z), hf_ftz_f32(__imag__ z))
                : hf_c64_of(__builtin_complex(re / m, im / m));
}
"""

# complex ops with a c128 helper or C library function: c64 widens, calls it, rounds once
COMPLEX_FUNCTIONS = {
    "multiply": "hf_cmul_c128", "divide": "hf_cdiv_c128",
    "sign": "hf_csign_c128", "exponential-minus-one": "hf_cexpm1_c128",
    "log-plus-one": "hf_clog1p_c128", "rsqrt": "hf_crsqrt_c128",
    "logistic": "hf_clogistic_c128", "exponential": "cexp", "log": "clog", "sqrt": "csqrt",
    "sine": "csin", "cosine": "ccos", "tan": "hf_ctan_c128", "tanh": "hf_ctanh_c128",
    "acos": "cacos",
    "asin": "casin", "atan": "catan", "acosh": "cacosh", "asinh": "casinh", "atanh": "catanh",
    "cosh": "ccosh", "sinh": "csinh",
}


@functools.cache
def helpers() -> str:
    """mulhi, the small-float conversions and the complex helpers."""
    parts = [_mulhi(), _COMPLEX_CORE, _TAG]
    parts += [_small_float(name) for name in SMALL_FLOATS]
    return "".join(parts)
