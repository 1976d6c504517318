"""exp, log, tanh, logistic, sin and cos for f32 in f32 arithmetic, written once and instantiated
for scalars and for explicit SIMD vectors of any width (GCC/Clang vector extensions).

    template (C text over F, I, U, SEL, FMA, AS_U, AS_F, TO_F)
        ├─ scalar(): hf_exp_f32(float) ...           the mathlib functions cexpr calls
        └─ vector(w): hf_exp_v16_f32(hf_v16_f32) ... what cvec emits in a vector loop

Why: mathlib's other f32 routines evaluate in double (0.5 ulp), which costs two double vectors,
conversions and a double division per float vector: exp, tanh and logistic ran at ~1 ns per
element, the bottleneck of softmax, attention and GELU kernels, and sin/cos (3.4 ns, most of it
the large-argument reduction every lane computes) that of CartPole's physics. These run in f32
with a few more ops for accuracy, and the vector forms are one vector expression each (no lane
loop, no reliance on the auto-vectorizer).

What they guarantee (measured over every f32 bit pattern by `scripts/mathlib_ulp.py`; the
bounds are `mathlib.MAX_ULP`, tests/test_cpu_mathlib.py checks them on a million inputs):
- exp <= 0.94 ulp, log <= 0.84 ulp, tanh <= 4.9 ulp (6.9 without FMA: XLA's approximation),
  logistic <= 2.41 ulp, sin <= 0.78 ulp, cos <= 0.79 ulp (a few ulp is what XLA's own f32
  approximations and numpy's SIMD float32 functions allow; JAX's float32 test tolerance is
  1e-6 relative, about 8 ulp).
- The scalar and every vector instantiation compute the same sequence of IEEE f32 operations: a
  value gets the same bits in a vector loop, its scalar tail, or a scalar kernel. Polynomials
  are Horner chains of `FMA`: fused multiply-adds where the target has them (x86 FMA3,
  AArch64; `HF_VM_FUSED`, decided once per file, so both forms agree) and a rounded product
  plus a sum where it does not (the bounds above hold either way; docs/mathlib.md has both
  sets of maxima). Softmax, one thread: 0.170 -> 0.145 ms with them. No table lookups (no
  gathers), no branches. sin and cos
  for |x| >= SINCOS_MAX (4096), inf and nan are mathlib's double routines (0.5 ulp, exact
  reduction of any argument) in both forms: the scalar function selects between the two
  paths, the vector function branches (rarely) to the double routine run on all its lanes.
- Specials as the interpreter: exp(-inf) = 0, exp(inf) = inf, overflow to inf above 88.72,
  results in the subnormal range rounded (not flushed) unless the CPU flushes them; log of a
  negative or -inf is nan, log(+-0) = -inf, log(inf) = inf, subnormal inputs are normalized;
  tanh and sin keep the sign of zero; sin/cos(inf) = nan; nan in, nan out.

How:
- exp: k = round(x / ln2) with the 1.5 * 2^23 trick (x clamped to [-104, 89], so 2^k and its
  two halves are normal floats), r = x - k ln2 with ln2 in two parts (k * ln2_hi exact) and the
  rounding error of r kept (r_lo), exp(r) - 1 by Taylor to r^7 (error < 5e-9 on |r| <= ln2/2),
  then (2^k1 + 2^k1 p) * 2^k2, k1 + k2 = k: one rounding for normal results, and subnormal ones
  rounded from a normal intermediate.
- log: x = 2^k m with m in [sqrt(1/2), sqrt(2)) from the bits (subnormals scaled by 2^23 first),
  f = m - 1, s = f / (2 + f), log(1 + f) = f - (f^2/2 - s (f^2/2 + R(s^2))) with fdlibm's
  degree-4 R, plus k ln2 in two parts.
- tanh: XLA's CPU approximation, x itself for |x| < 0.0004, else x P(x^2) / Q(x^2) (degrees
  6 and 3 in x^2) on x clamped to +-7.99881 (+-7.90531 without FMA): on a host with FMA the
  same operations in the same order as jax.jit's, so the same bits; 4.9 ulp at most (6.9
  without FMA).
- logistic: t = exp(-|x|), 1 / (1 + t) for x >= 0, t / (1 + t) below (no overflow, and
  subnormal results for very negative x).
- sin, cos (|x| < 2^12): k = round(x * 2/pi), pi/2 = C1 + C2 + C3 + C4 with C1..C3 of at most
  11 bits (k * Ci exact for |k| < 2^12), x - k C1 exact (Sterbenz), the next two subtractions
  as two-sums, so r + r_lo is x - k pi/2 within about 2^-50; sin r = r + (r_lo (1 - r^2/2) +
  r^3 S(r^2)), cos r = 1 - r^2/2 + (r^4 C(r^2) - r r_lo) with the rounding of 1 - r^2/2 kept
  (fdlibm's kernel), S and C Taylor to r^9 / r^10; quadrant k (+1 for cos) picks and signs.
"""

from __future__ import annotations

import functools
import re

OPS = ("exp", "log", "tanh", "logistic", "sin", "cos")
SINCOS_MAX = 4096.0  # sin/cos in f32 below this |x|; above (and inf, nan): the double path

# tanh = x P(x^2) / Q(x^2) on x clamped to +-7.9988 (+-7.9053 without FMA), x itself below
# 0.0004: XLA's CPU approximation (llvm_ir/math_ops.cc EmitFastTanh, from Eigen), Horner in
# the same order, so on a host with FMA it is jax.jit's tanh bit for bit. Coefficients lowest
# degree first, as f32 literals of XLA's decimal ones.
_TANH_P = ["4.89352455891786e-03f", "6.37261928875436e-04f", "1.48572235717979e-05f",
           "5.12229709037114e-08f", "-8.60467152213735e-11f", "2.00018790482477e-13f",
           "-2.76076847742355e-16f"]
_TANH_Q = ["4.89352518554385e-03f", "2.26843463243900e-03f", "1.18534705686654e-04f",
           "1.19825839466702e-06f"]


def _horner(var: str, coeffs: list[str]) -> str:
    """c0 + var*(c1 + var*(...)): one fused multiply-add per coefficient (`FMA`)."""
    expr = f"K({coeffs[-1]})"
    for c in reversed(coeffs[:-1]):
        expr = f"FMA({var}, {expr}, K({c}))"
    return expr


# FMA(a, b, c) = a*b + c, rounded once where the target has fused multiply-add (x86 FMA3,
# AArch64): __builtin_fmaf per lane, which GCC turns into packed vfmadd for a vector (the
# backend's -ffp-contract=off never fuses on its own). Without it, a*b + c rounded twice, in
# the scalar and the vector forms alike, so they agree bit for bit either way.
FMA_SOURCE = """#ifndef HF_VM_FUSED
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define HF_VM_FUSED 1
#else
#define HF_VM_FUSED 0
#endif
#if HF_VM_FUSED && (defined(__x86_64__) || defined(__i386__))
#if defined(__GNUC__) && !defined(__clang__)
typedef float hf__vm_v4sf __attribute__((vector_size(16)));
typedef float hf__vm_v8sf __attribute__((vector_size(32)));
typedef float hf__vm_v16sf __attribute__((vector_size(64)));
#define HF__VM_FMA128(a, b, c) __builtin_ia32_vfmaddps((a), (b), (c))
#define HF__VM_FMA256(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
#define HF__VM_FMA512(a, b, c) __builtin_ia32_vfmaddps512_mask((a), (b), (c), (unsigned short)-1, 4)
#else
#include <immintrin.h>
typedef __m128 hf__vm_v4sf;
typedef __m256 hf__vm_v8sf;
typedef __m512 hf__vm_v16sf;
#define HF__VM_FMA128(a, b, c) _mm_fmadd_ps((a), (b), (c))
#define HF__VM_FMA256(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define HF__VM_FMA512(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#endif
#elif HF_VM_FUSED && defined(__ARM_NEON)
#include <arm_neon.h>
#endif
#endif
"""


def _vector_fma(f: str, w: int) -> str:
    """hf__vm_fma_v{w}: a packed fused multiply-add (AVX-512, FMA3 on 256- or 128-bit halves,
    NEON), a lane loop of __builtin_fmaf on other targets that fuse, a*b + c where none does.
    Packed instructions, not a lane loop GCC would vectorize: a 2,000-op chain of exp/tanh
    inlines thousands of them, and vectorizing each loop took 4x the C compile. On x86 with
    GCC they are GCC's own builtins (`HF__VM_FMA*`, the ones <immintrin.h> wraps), not the
    header: parsing <immintrin.h> took 0.17 s of every file's compile, more than half of a
    small program's; other compilers include it."""
    def halves(vec: str, intr: str, lanes: int) -> str:
        n = w // lanes
        return (f"    union {{ {f} v; {vec} p[{n}]; }} x = {{a}}, y = {{b}}, z = {{c}};\n"
                f"    for (int i = 0; i < {n}; ++i) z.p[i] = {intr};\n    return z.v;\n")
    body = "#if !HF_VM_FUSED\n    return a * b + c;\n"
    if w == 16:
        body += ("#elif defined(__AVX512F__)\n"
                 "    return (" + f + ")HF__VM_FMA512((hf__vm_v16sf)a, (hf__vm_v16sf)b, "
                 "(hf__vm_v16sf)c);\n")
    if w % 8 == 0:
        body += "#elif defined(__FMA__)\n" + halves(
            "hf__vm_v8sf", "HF__VM_FMA256(x.p[i], y.p[i], z.p[i])", 8)
    else:
        body += "#elif defined(__FMA__)\n" + halves(
            "hf__vm_v4sf", "HF__VM_FMA128(x.p[i], y.p[i], z.p[i])", 4)
    body += "#elif defined(__ARM_NEON)\n" + halves(
        "float32x4_t", "vfmaq_f32(z.p[i], x.p[i], y.p[i])", 4)
    body += (f"#else\n    {f} r;\n    for (int l = 0; l < {w}; ++l) "
             "r[l] = __builtin_fmaf(a[l], b[l], c[l]);\n    return r;\n#endif\n")
    return f"static inline {f} hf__vm_fma_v{w}({f} a, {f} b, {f} c)\n{{\n{body}}}\n"


# The functions, over: F (float type), I (int32), U (uint32); SEL(c, a, b) picks a float where
# the comparison c holds (1 for scalars, lane masks for vectors);
# K(c) is the constant c as an F; AS_U / AS_F reinterpret bits; TO_F converts int32 to float.
# The suffix of every function name is `$`.
_TEMPLATE = r"""
static inline F hf_exp$(F x)
{
    F xc = SEL(x < -104.0f, K(-104.0f), x);
    xc = SEL(xc > 89.0f, K(89.0f), xc);                  /* nan stays nan */
    const F t = xc * 0x1.715476p+0f + 0x1.8p23f;        /* 1.5 * 2^23 + round(x / ln2) */
    const F kf = t - 0x1.8p23f;
    const I k = (I)AS_U(t) - 0x4b400000;
    const F xr = xc - kf * 0x1.62e4p-1f;                 /* exact: ln2_hi has 15 bits */
    const F c = kf * 0x1.7f7d1cp-20f;                    /* ln2_lo = ln2 - ln2_hi */
    const F r = xr - c;
    const F rl = (xr - r) - c;                           /* the rounding error of r */
    const F q = @EXP_Q@;
    const F p = r + FMA(r * r, q, rl);                   /* exp(r) - 1 */
    const I k1 = k >> 1, k2 = k - k1;
    const F s1 = AS_F((U)(k1 + 127) << 23), s2 = AS_F((U)(k2 + 127) << 23);
    return FMA(s1, p, s1) * s2;
}

static inline F hf_log$(F x)
{
    const I sub = (x < 0x1p-126f) & (x > 0.0f);          /* positive subnormal */
    const U u = AS_U(SEL(sub, x * 0x1p23f, x));
    const U d = u - 0x3f3504f3u;                         /* bits of sqrt(1/2) */
    const I e = (I)d >> 23;
    const F m = AS_F(u - ((U)e << 23));                  /* in [sqrt(1/2), sqrt(2)) */
    const F kf = TO_F(e) - SEL(sub, K(23.0f), K(0.0f));
    const F f = m - 1.0f;
    const F s = f / (2.0f + f);
    const F z = s * s, w = z * z;
    const F R = z * (0x1.555554p-1f + w * 0x1.23d3dcp-2f)
                + w * (0x1.999c26p-2f + w * 0x1.f13c4cp-3f);
    const F hfsq = 0.5f * f * f;
    F r = kf * 0x1.62e3p-1f - ((hfsq - (s * (hfsq + R) + kf * 0x1.2fefa2p-17f)) - f);
    r = SEL(x == __builtin_inff(), x, r);
    r = SEL(x == 0.0f, K(-__builtin_inff()), r);
    r = SEL(x < 0.0f, K(__builtin_nanf("")), r);
    return SEL(x != x, x, r);
}

static inline F hf_tanh$(F x)
{
#if HF_VM_FUSED
    const float c = 7.99881172180175781f;                /* XLA's clamps: tanh = +-1 there */
#else
    const float c = 7.90531110763549805f;
#endif
    F xc = SEL(x > c, K(c), x);                          /* nan stays nan */
    xc = SEL(xc < -c, K(-c), xc);
    const F z = xc * xc;
    const F p = xc * @TANH_P@;
    const F q = @TANH_Q@;
    /* x * 0 + x: x itself, or a zero of its sign for a subnormal x read as zero (DAZ) */
    return SEL(AS_F(AS_U(x) & 0x7fffffffu) < 0.0004f, FMA(x, K(0.0f), x), p / q);
}

static inline F hf_logistic$(F x)
{
    const F t = hf_exp$(-AS_F(AS_U(x) & 0x7fffffffu));
    return SEL(x >= 0.0f, K(1.0f), t) / (1.0f + t);
}

/* sin(x) (off = 0) or cos(x) = sin(x + pi/2) (off = 1) for |x| < 2^12 */
static inline F hf__sincos$(F x, int off)
{
    const F t = x * 0x1.45f306p-1f + 0x1.8p23f;          /* 1.5 * 2^23 + round(x * 2/pi) */
    const F kf = t - 0x1.8p23f;
    const I k = (I)AS_U(t) - 0x4b400000;
    const F a = x - kf * 0x1.92p0f;                      /* exact: C1 has 8 bits, |k| < 2^12 */
    const F b = -(kf * 0x1.fb4p-12f);                    /* exact: C2 has 11 bits */
    const F u = a + b;                                   /* two-sum: u + e1 = a + b exactly */
    const F ua = u - b, ub = u - ua;
    const F e1 = (a - ua) + (b - ub);
    const F c = -(kf * 0x1.444p-24f);                    /* exact: C3 has 11 bits */
    const F r = u + c;                                   /* two-sum: r + e2 = u + c */
    const F ra = r - c, rb = r - ra;
    const F e2 = (u - ra) + (c - rb);
    const F rl = (e1 + e2) - kf * 0x1.68c234p-39f;       /* C4 = pi/2 - C1 - C2 - C3 */
    const F z = r * r;
    const F sn = r + (rl * (1.0f - 0.5f * z) + (r * z) * @SIN_S@);
    const F hz = 0.5f * z, w = 1.0f - hz;
    const F cs = w + (((1.0f - w) - hz) + ((z * z) * @COS_C@ - r * rl));
    const I q = k + off;                                 /* quadrant: s, c, -s, -c */
    const F v = SEL((q & 1) != 0, cs, sn);
    return AS_F(AS_U(v) ^ ((U)(q & 2) << 30));
}

static inline F hf__sin_small$(F x) { return SEL(x == 0.0f, x, hf__sincos$(x, 0)); }

static inline F hf__cos_small$(F x) { return hf__sincos$(x, 1); }
"""


_EXP_Q = ["0x1p-1f", "0x1.555556p-3f", "0x1.555556p-5f", "0x1.111112p-7f", "0x1.6c16c2p-10f",
          "0x1.a01a02p-13f"]  # 1/2!, ..., 1/7! as f32
# Taylor coefficients as f32: sin r = r + r z S(z), S = -1/3! + z/5! - z^2/7! + z^3/9!;
# cos r = 1 - z/2 + z^2 C(z), C = 1/4! - z/6! + z^2/8! - z^3/10!  (z = r^2, |r| <= pi/4 + eps)
_SIN_S = ["-0x1.555556p-3f", "0x1.111112p-7f", "-0x1.a01a02p-13f", "0x1.71de3ap-19f"]
_COS_C = ["0x1.555556p-5f", "-0x1.6c16c2p-10f", "0x1.a01a02p-16f", "-0x1.27e4fcp-22f"]


def _instantiate(suffix: str, types: tuple[str, str, str], helpers: dict[str, str]) -> str:
    f, i, u = types
    text = _TEMPLATE.replace("@EXP_Q@", _horner("r", _EXP_Q))
    text = text.replace("@TANH_P@", _horner("z", _TANH_P))
    text = text.replace("@TANH_Q@", _horner("z", _TANH_Q))
    text = text.replace("@SIN_S@", _horner("z", _SIN_S)).replace("@COS_C@", _horner("z", _COS_C))
    text = text.replace("$", suffix)
    words = {"F": f, "I": i, "U": u, **helpers}
    ident = re.compile(r"\b[A-Za-z_][A-Za-z_0-9]*\b")
    return "\n".join(ident.sub(lambda m: words.get(m.group(0), m.group(0)), line)
                     for line in text.splitlines()) + "\n"


@functools.cache
def scalar() -> str:
    """The scalar instantiation: hf_exp_f32, hf_log_f32, hf_tanh_f32, hf_logistic_f32,
    hf_sin_f32, hf_cos_f32 (needs mathlib's hf__as_u32 / hf__as_f32, and its double-evaluated
    hf__sin_dbl_f32 / hf__cos_dbl_f32 for |x| >= SINCOS_MAX)."""
    helpers = FMA_SOURCE + (
        "static inline float hf__vm_sel_f32(int c, float a, float b) { return c ? a : b; }\n"
        "static inline float hf__vm_k_f32(float c) { return c; }\n"
        "static inline float hf__vm_tof_f32(int32_t x) { return (float)x; }\n"
        "static inline float hf__vm_fma_f32(float a, float b, float c)\n"
        "{\n#if HF_VM_FUSED\n    return __builtin_fmaf(a, b, c);\n#else\n"
        "    return a * b + c;\n#endif\n}\n"
    )
    text = helpers + _instantiate("_f32", ("float", "int32_t", "uint32_t"), {
        "SEL": "hf__vm_sel_f32", "K": "hf__vm_k_f32", "FMA": "hf__vm_fma_f32",
        "AS_U": "hf__as_u32", "AS_F": "hf__as_f32", "TO_F": "hf__vm_tof_f32"})
    for op in ("sin", "cos"):
        # both computed and one selected, not a branch: GCC if-converts and SIMD-vectorizes a
        # loop calling it (a branch to the double path's table loads it would not)
        text += (f"static inline float hf_{op}_f32(float x)\n{{\n"
                 f"    return hf__vm_sel_f32(__builtin_fabsf(x) < {SINCOS_MAX.hex()}f, "
                 f"hf__{op}_small_f32(x), hf__{op}_dbl_f32(x)); /* large, inf, nan: double */"
                 f"\n}}\n")
    return text


@functools.cache
def vector(w: int) -> str:
    """The instantiation for hf_v{w}_f32 vectors: hf_exp_v{w}_f32, ... (needs cvec's vector
    types of width `w`, and mathlib's source before it)."""
    f, i, u = (f"hf_v{w}_{s}" for s in ("f32", "i32", "u32"))
    sfx = f"_v{w}"
    helpers = (
        f"static inline {f} hf__vm_sel{sfx}({i} c, {f} a, {f} b) "
        f"{{ return ({f})((({u})a & ({u})c) | (({u})b & ~({u})c)); }}\n"
        f"static inline {f} hf__vm_k{sfx}(float c) {{ return ({f}){{0}} + c; }}\n"
        f"static inline {u} hf__vm_u{sfx}({f} x) {{ return ({u})x; }}\n"
        f"static inline {f} hf__vm_f{sfx}({u} x) {{ return ({f})x; }}\n"
        f"static inline {f} hf__vm_tof{sfx}({i} x) {{ return __builtin_convertvector(x, {f}); }}\n"
    ) + _vector_fma(f, w)
    # any lane of a mask set: OR of halves down to one lane
    tree, cur, lanes = [], "m", w
    while lanes > 1:
        half = lanes // 2
        lo, hi = ", ".join(map(str, range(half))), ", ".join(map(str, range(half, lanes)))
        tree.append(f"__auto_type h{half} = __builtin_shufflevector({cur}, {cur}, {lo}) | "
                    f"__builtin_shufflevector({cur}, {cur}, {hi});")
        cur, lanes = f"h{half}", half
    helpers += (f"static inline int hf__vm_any{sfx}({i} m)\n{{\n    " + "\n    ".join(tree)
                + f"\n    return {cur}[0] != 0;\n}}\n")
    text = FMA_SOURCE + helpers + _instantiate(f"{sfx}_f32", (f, i, u), {
        "SEL": f"hf__vm_sel{sfx}", "K": f"hf__vm_k{sfx}", "FMA": f"hf__vm_fma{sfx}",
        "AS_U": f"hf__vm_u{sfx}", "AS_F": f"hf__vm_f{sfx}", "TO_F": f"hf__vm_tof{sfx}"})
    for op in ("sin", "cos"):
        # a vector with a lane |x| >= SINCOS_MAX, inf or nan (a rare branch): the double path
        # on every lane, a lane loop GCC vectorizes (packed double code, as mathlib's lane
        # loops), selected for those lanes: the scalar function's bits
        text += (f"static inline {f} hf_{op}{sfx}_f32({f} x)\n{{\n"
                 f"    const {f} y = hf__{op}_small{sfx}_f32(x);\n"
                 f"    const {i} big = ~(hf__vm_f{sfx}(hf__vm_u{sfx}(x) & 0x7fffffffu) < "
                 f"{SINCOS_MAX.hex()}f);\n"
                 f"    if (__builtin_expect(!hf__vm_any{sfx}(big), 1))\n"
                 f"        return y;\n"
                 f"    {f} d;\n"
                 f"    for (int l = 0; l < {w}; ++l)\n"
                 f"        d[l] = hf__{op}_dbl_f32(x[l]);\n"
                 f"    return hf__vm_sel{sfx}(big, d, y);\n}}\n")
    return text


def function(op: str, w: int) -> str:
    """The name of `op` (one of OPS) on vectors of `w` f32 lanes."""
    return f"hf_{op}_v{w}_f32"
